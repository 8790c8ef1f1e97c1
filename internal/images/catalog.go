package images

import (
	"context"
	"fmt"
	"sort"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// CatalogImage is one published image version.
type CatalogImage struct {
	Publisher, Offer, SKU, Version string
	OS                             infrav1.OSType
}

// Catalog is a fixed set of published images. It is the reference catalog the
// ARM emulator serves through the VirtualMachineImages API, and a Lister over
// it answers the same questions without HTTP.
type Catalog []CatalogImage

// ListSKUs lists the SKUs of an offer (every location carries the same catalog).
func (c Catalog) ListSKUs(_ context.Context, _ string, publisher, offer string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, im := range c {
		if im.Publisher == publisher && im.Offer == offer && !seen[im.SKU] {
			seen[im.SKU] = true
			out = append(out, im.SKU)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ListVersions lists the versions of a SKU.
func (c Catalog) ListVersions(_ context.Context, _ string, publisher, offer, sku string) ([]string, error) {
	var out []string
	for _, im := range c {
		if im.Publisher == publisher && im.Offer == offer && im.SKU == sku {
			out = append(out, im.Version)
		}
	}
	sort.Slice(out, func(i, j int) bool { return lessDotted(out[i], out[j]) })
	return out, nil
}

// referencePatches is how many patch releases of each minor the reference
// catalog holds; the newest minor is v1.36, up to v1.36.3.
func referencePatches(minor int) int {
	if minor == 36 {
		return 4
	}
	return 6
}

// ReferenceCatalog is the cncf-upstream catalog as winkube's emulator serves
// it: for Kubernetes v1.18 to v1.36, the old per-version SKUs before v1.28
// (dated versions, two builds each) and the version-free SKUs from v1.28 on
// (versions <maj><min>.<patch>.<date>, two builds per patch).
func ReferenceCatalog() Catalog {
	var c Catalog
	add := func(offer, sku, version string, os infrav1.OSType) {
		c = append(c, CatalogImage{Publisher: Publisher, Offer: offer, SKU: sku, Version: version, OS: os})
	}
	for minor := 18; minor <= 36; minor++ {
		year := 2020 + (minor-18)/3
		for patch := 0; patch < referencePatches(minor); patch++ {
			v := Version{Major: 1, Minor: minor, Patch: patch}
			dates := []string{
				fmt.Sprintf("%d.%02d.%02d", year, 1+patch, 10),
				fmt.Sprintf("%d.%02d.%02d", year, 1+patch, 24),
			}
			for _, win := range []infrav1.WindowsServerVersion{infrav1.WindowsServer2019, infrav1.WindowsServer2022, infrav1.WindowsServer2025} {
				for _, rt := range []infrav1.ContainerRuntime{infrav1.Containerd, infrav1.Dockershim} {
					if ValidateRuntime(v, infrav1.Windows, win, rt) != nil {
						continue
					}
					_, skus, newStyle := Candidates(v, Request{OS: infrav1.Windows, WindowsVersion: win, Runtime: rt})
					for _, d := range dates {
						version := d
						if newStyle {
							version = VersionPrefix(v) + compactDate(d)
						}
						add(WindowsOffer, skus[0], version, infrav1.Windows)
					}
				}
			}
			_, linuxSKUs, newStyle := Candidates(v, Request{OS: infrav1.Linux})
			// Ubuntu 24.04 images start with v1.31; older releases only have 22.04.
			sku := linuxSKUs[0]
			if newStyle && minor < 31 {
				sku = linuxSKUs[1]
			} else if !newStyle {
				sku = linuxSKUs[1] // ubuntu-2004, the common one in that era
			}
			for _, d := range dates {
				version := d
				if newStyle {
					version = VersionPrefix(v) + compactDate(d)
				}
				add(LinuxOffer, sku, version, infrav1.Linux)
			}
		}
	}
	return c
}

// compactDate turns 2024.07.17 into 20240717.
func compactDate(d string) string {
	out := make([]byte, 0, len(d))
	for i := 0; i < len(d); i++ {
		if d[i] != '.' {
			out = append(out, d[i])
		}
	}
	return string(out)
}
