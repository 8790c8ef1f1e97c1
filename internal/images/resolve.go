package images

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

const (
	// Publisher of the Cluster API reference images.
	Publisher = "cncf-upstream"
	// LinuxOffer and WindowsOffer are the reference images' offers.
	LinuxOffer   = "capi"
	WindowsOffer = "capi-windows"
	// CommunityGallery is the public name of the community gallery that
	// carries the reference images as image definitions.
	CommunityGallery = "ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019"

	// newSKUMinor is the first minor release published under the version-free
	// SKUs (windows-2022-containerd-gen1) whose image versions carry the
	// Kubernetes version instead; older releases have one SKU per version
	// (k8s-1dot22dot1-windows-2019-containerd).
	newSKUMinor = 28
)

// Lister reads the VM image catalog of a location (Azure's
// VirtualMachineImages API, served by the ARM emulator locally).
type Lister interface {
	ListSKUs(ctx context.Context, location, publisher, offer string) ([]string, error)
	ListVersions(ctx context.Context, location, publisher, offer, sku string) ([]string, error)
}

// Source is where default images come from.
type Source string

const (
	Marketplace            Source = "marketplace"
	CommunityGallerySource Source = "community-gallery"
)

// Request describes the node that needs an image.
type Request struct {
	Location          string
	KubernetesVersion string
	OS                infrav1.OSType
	WindowsVersion    infrav1.WindowsServerVersion
	Runtime           infrav1.ContainerRuntime
	Source            Source
}

// Resolver picks default images, caching what the catalog lists.
type Resolver struct {
	lister Lister
	ttl    time.Duration
	now    func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	items []string
	at    time.Time
}

// NewResolver returns a Resolver that lists through l and keeps each listing
// for ttl (a published image does not disappear, so an hour is safe).
func NewResolver(l Lister, ttl time.Duration) *Resolver {
	return &Resolver{lister: l, ttl: ttl, now: time.Now, cache: map[string]cached{}}
}

// Resolve returns explicit when it is set (a user's image always wins) and
// otherwise the default image for req.
func (r *Resolver) Resolve(ctx context.Context, explicit *infrav1.Image, req Request) (*infrav1.Image, error) {
	if explicit != nil {
		return explicit, nil
	}
	v, err := ParseVersion(req.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	if req.OS == "" {
		req.OS = infrav1.Linux
	}
	if req.OS == infrav1.Windows && req.WindowsVersion == "" {
		req.WindowsVersion = infrav1.WindowsServer2022
	}
	if req.Runtime == "" {
		req.Runtime = infrav1.Containerd
	}
	if err := ValidateRuntime(v, req.OS, req.WindowsVersion, req.Runtime); err != nil {
		return nil, err
	}
	if req.Source == CommunityGallerySource {
		return communityGalleryImage(v, req), nil
	}
	return r.marketplaceImage(ctx, v, req)
}

func communityGalleryImage(v Version, req Request) *infrav1.Image {
	name := "capi-ubun2-2404"
	if req.OS == infrav1.Windows {
		name = fmt.Sprintf("capi-win-%s-containerd", req.WindowsVersion)
	}
	return &infrav1.Image{ComputeGallery: &infrav1.ComputeGalleryImage{
		Gallery: CommunityGallery,
		Name:    name,
		Version: strings.TrimPrefix(v.String(), "v"),
	}}
}

// Candidates lists the SKUs to try for a request, best first, and says
// whether their versions are keyed by the Kubernetes version (new style) or
// the SKU itself names the version (old style).
func Candidates(v Version, req Request) (offer string, skus []string, newStyle bool) {
	dotted := fmt.Sprintf("k8s-%ddot%ddot%d", v.Major, v.Minor, v.Patch)
	if req.OS == infrav1.Windows {
		offer = WindowsOffer
		if v.AtLeast(1, newSKUMinor) {
			return offer, []string{fmt.Sprintf("windows-%s-containerd-gen1", req.WindowsVersion)}, true
		}
		if req.Runtime == infrav1.Dockershim {
			return offer, []string{fmt.Sprintf("%s-windows-%s", dotted, req.WindowsVersion)}, false
		}
		return offer, []string{fmt.Sprintf("%s-windows-%s-containerd", dotted, req.WindowsVersion)}, false
	}
	offer = LinuxOffer
	if v.AtLeast(1, newSKUMinor) {
		return offer, []string{"ubuntu-2404-gen1", "ubuntu-2204-gen1"}, true
	}
	return offer, []string{dotted + "-ubuntu-2204", dotted + "-ubuntu-2004", dotted + "-ubuntu-1804"}, false
}

// VersionPrefix is how new-style image versions begin for a Kubernetes
// version: v1.28.12 -> "128.12.".
func VersionPrefix(v Version) string {
	return fmt.Sprintf("%d%d.%d.", v.Major, v.Minor, v.Patch)
}

func (r *Resolver) marketplaceImage(ctx context.Context, v Version, req Request) (*infrav1.Image, error) {
	offer, skus, newStyle := Candidates(v, req)
	available, err := r.list(ctx, "skus", req.Location, offer, "")
	if err != nil {
		return nil, fmt.Errorf("listing %s:%s images in %s: %w", Publisher, offer, req.Location, err)
	}
	for _, sku := range skus {
		if !contains(available, sku) {
			continue
		}
		versions, err := r.list(ctx, "versions", req.Location, offer, sku)
		if err != nil {
			return nil, fmt.Errorf("listing versions of %s:%s:%s in %s: %w", Publisher, offer, sku, req.Location, err)
		}
		if newStyle {
			versions = withPrefix(versions, VersionPrefix(v))
		}
		if latest, ok := newest(versions); ok {
			return &infrav1.Image{Marketplace: &infrav1.MarketplaceImage{
				Publisher: Publisher, Offer: offer, SKU: sku, Version: latest,
			}}, nil
		}
	}
	what := string(req.OS)
	if req.OS == infrav1.Windows {
		what = fmt.Sprintf("Windows Server %s (%s)", req.WindowsVersion, req.Runtime)
	}
	return nil, fmt.Errorf("no %s image for Kubernetes %s in %s: %s:%s has none of the SKUs %s with such a version; pick another Kubernetes version or set spec.image",
		what, v, req.Location, Publisher, offer, strings.Join(skus, ", "))
}

func (r *Resolver) list(ctx context.Context, kind, location, offer, sku string) ([]string, error) {
	key := strings.Join([]string{kind, location, offer, sku}, "/")
	r.mu.Lock()
	c, ok := r.cache[key]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < r.ttl {
		return c.items, nil
	}
	var items []string
	var err error
	if kind == "skus" {
		items, err = r.lister.ListSKUs(ctx, location, Publisher, offer)
	} else {
		items, err = r.lister.ListVersions(ctx, location, Publisher, offer, sku)
	}
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.cache[key] = cached{items: items, at: r.now()}
	r.mu.Unlock()
	return items, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func withPrefix(versions []string, prefix string) []string {
	var out []string
	for _, v := range versions {
		if strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// newest returns the highest dotted-numeric version.
func newest(versions []string) (string, bool) {
	if len(versions) == 0 {
		return "", false
	}
	sorted := append([]string(nil), versions...)
	sort.Slice(sorted, func(i, j int) bool { return lessDotted(sorted[i], sorted[j]) })
	return sorted[len(sorted)-1], true
}

func lessDotted(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		ai, aerr := strconv.Atoi(as[i])
		bi, berr := strconv.Atoi(bs[i])
		if aerr != nil || berr != nil {
			if as[i] != bs[i] {
				return as[i] < bs[i]
			}
			continue
		}
		if ai != bi {
			return ai < bi
		}
	}
	return len(as) < len(bs)
}
