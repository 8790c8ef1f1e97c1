package images

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// DefaultWindowsRelease is the release winkube boots for a Windows VM spec
// that leaves windowsServerVersion unset (its AzureMachine webhook's
// default). CAPZ's default was Windows Server 2019
// (DefaultWindowsOsAndVersion in kubernetes-sigs/cluster-api-provider-azure
// azure/defaults.go at 2d1e96bf8ab37e3da96b68ba086988163e132c3d), so a pool
// created before winkube wrote the default may run another release.
const DefaultWindowsRelease = infrav1.WindowsServer2022

// PoolRelease is the Windows Server release a pool runs whose template
// leaves windowsServerVersion unset.
type PoolRelease struct {
	// Release is what the pool runs now: its nodes' release, else its
	// image's, else DefaultWindowsRelease. Empty when its nodes run two.
	Release infrav1.WindowsServerVersion
	// Why says where Release was read from.
	Why string
	// Nodes are the pool's Windows nodes by the release their build is
	// of; two keys when the pool runs two releases.
	Nodes map[infrav1.WindowsServerVersion][]string
}

// RunningRelease reads a pool's release from its nodes' builds (node name
// to build), which say what its machines really boot, else from its
// image's name, else the default its new machines would boot.
func RunningRelease(img *infrav1.Image, builds map[string]string) PoolRelease {
	pr := PoolRelease{Nodes: map[infrav1.WindowsServerVersion][]string{}}
	for _, name := range slices.Sorted(maps.Keys(builds)) {
		if r := WindowsRelease(builds[name]); r != "" {
			pr.Nodes[r] = append(pr.Nodes[r], name)
		}
	}
	switch len(pr.Nodes) {
	case 0:
		if pr.Release = ImageRelease(img); pr.Release != "" {
			pr.Why = "the release of its image " + DescribeImage(img)
		} else {
			pr.Release, pr.Why = DefaultWindowsRelease, "the default its machines boot today (no node of the pool to read its build from)"
		}
	case 1:
		for r, nodes := range pr.Nodes {
			pr.Release, pr.Why = r, fmt.Sprintf("the release its nodes run (%s: %s)", WindowsBuild[r], strings.Join(nodes, ", "))
		}
	}
	return pr
}

// Releases names the releases of a pool that runs two or more, with their
// nodes ("Windows Server 2019 (a, b) and Windows Server 2022 (c)").
func (pr PoolRelease) Releases() string {
	var runs []string
	for _, r := range slices.Sorted(maps.Keys(pr.Nodes)) {
		runs = append(runs, fmt.Sprintf("Windows Server %s (%s)", r, strings.Join(pr.Nodes[r], ", ")))
	}
	return strings.Join(runs, " and ")
}

// ImageRelease is the Windows Server release a reference image's name says
// (capi-win-2019-containerd, windows-2022-containerd-gen1,
// k8s-1dot22dot1-windows-2019-containerd), "" when it says none.
func ImageRelease(img *infrav1.Image) infrav1.WindowsServerVersion {
	var name string
	switch {
	case img == nil:
		return ""
	case img.ComputeGallery != nil:
		name = img.ComputeGallery.Name
	case img.Marketplace != nil:
		name = img.Marketplace.SKU
	}
	for rel := range WindowsBuild {
		if strings.Contains(name, "win-"+string(rel)+"-") || strings.Contains(name, "windows-"+string(rel)+"-") {
			return rel
		}
	}
	return ""
}

// DescribeImage names an image as a user wrote it.
func DescribeImage(img *infrav1.Image) string {
	switch {
	case img == nil:
		return "the default image"
	case img.ComputeGallery != nil:
		return img.ComputeGallery.Gallery + "/" + img.ComputeGallery.Name + ":" + img.ComputeGallery.Version
	case img.Marketplace != nil:
		m := img.Marketplace
		return m.Publisher + ":" + m.Offer + ":" + m.SKU + ":" + m.Version
	case img.ID != nil:
		return *img.ID
	}
	return "an image"
}
