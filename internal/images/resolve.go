package images

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/dotted"
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

// GalleryLister reads the versions of a community gallery's image definition
// in a location (Azure's CommunityGalleryImageVersions API); a definition
// the gallery does not have lists no versions. A Lister that is also a
// GalleryLister lets the Resolver default to the community gallery, as
// Cluster API Provider Azure does.
type GalleryLister interface {
	ListGalleryImageVersions(ctx context.Context, location, gallery, image string) ([]string, error)
}

// Source is where default images come from. Empty means the default:
// the community gallery where it publishes the version, the marketplace
// otherwise (the older releases), as Cluster API Provider Azure chooses.
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
	req = withDefaults(req)
	if err := ValidateRuntime(v, req.OS, req.WindowsVersion, req.Runtime); err != nil {
		return nil, err
	}
	if req.Source != Marketplace && req.Runtime == infrav1.Containerd {
		img, err := r.galleryImage(ctx, v, req)
		if err != nil || img != nil || req.Source == CommunityGallerySource {
			return img, err
		}
	}
	if req.Source == CommunityGallerySource {
		return nil, fmt.Errorf("the community gallery has no %s images: only containerd; use source %s", req.Runtime, Marketplace)
	}
	img, err := r.marketplaceImage(ctx, v, req)
	if _, gallery := r.lister.(GalleryLister); err != nil && gallery && req.Source == "" && req.Runtime == infrav1.Containerd {
		return nil, fmt.Errorf("%w; nor does the community gallery %s have version %s of %s", err, CommunityGallery, strings.TrimPrefix(v.String(), "v"), GalleryImageName(req))
	}
	return img, err
}

func withDefaults(req Request) Request {
	if req.OS == "" {
		req.OS = infrav1.Linux
	}
	if req.OS == infrav1.Windows && req.WindowsVersion == "" {
		req.WindowsVersion = infrav1.WindowsServer2022
	}
	if req.Runtime == "" {
		req.Runtime = infrav1.Containerd
	}
	return req
}

// IsDefaultFor says whether img is one of the images Resolve could pick as
// the default for req, whatever build of it: the community gallery's image
// of the request's Kubernetes version, or a marketplace SKU tried for it
// with, for the version-free SKUs, a version of that Kubernetes release.
// A pool keeps such an image when the marketplace publishes a newer build,
// and resolves again when a change of Kubernetes version, OS, Windows
// Server version or runtime makes it false.
func IsDefaultFor(img *infrav1.Image, req Request) bool {
	if img == nil {
		return false
	}
	v, err := ParseVersion(req.KubernetesVersion)
	if err != nil {
		return false
	}
	req = withDefaults(req)
	if g := img.ComputeGallery; g != nil {
		return req.Runtime == infrav1.Containerd && g.Gallery == CommunityGallery && g.SubscriptionID == nil &&
			g.Name == GalleryImageName(req) && g.Version == strings.TrimPrefix(v.String(), "v")
	}
	m := img.Marketplace
	if m == nil || img.ID != nil || m.Publisher != Publisher {
		return false
	}
	if offer, _, _ := Candidates(v, req); m.Offer != offer {
		return false
	}
	if contains(oldStyleSKUs(v, req), m.SKU) {
		return true // the SKU names the Kubernetes version
	}
	return contains(newStyleSKUs(req), m.SKU) && strings.HasPrefix(m.Version, VersionPrefix(v))
}

// GalleryImageName is the community gallery's image definition for a
// request: capi-ubun2-2404 for Linux, capi-win-<year>-containerd for Windows.
func GalleryImageName(req Request) string {
	if req.OS == infrav1.Windows {
		win := req.WindowsVersion
		if win == "" {
			win = infrav1.WindowsServer2022
		}
		return fmt.Sprintf("capi-win-%s-containerd", win)
	}
	return "capi-ubun2-2404"
}

// galleryImage is the community gallery's image for the request when the
// gallery lists its version in the location; nil when it does not.
func (r *Resolver) galleryImage(ctx context.Context, v Version, req Request) (*infrav1.Image, error) {
	gl, ok := r.lister.(GalleryLister)
	if !ok {
		if req.Source == CommunityGallerySource {
			return nil, fmt.Errorf("cannot list the community gallery %s: the catalog reader reads only the marketplace", CommunityGallery)
		}
		return nil, nil
	}
	name := GalleryImageName(req)
	versions, err := r.cachedList(ctx, "gallery/"+req.Location+"/"+name, func() ([]string, error) {
		return gl.ListGalleryImageVersions(ctx, req.Location, CommunityGallery, name)
	})
	if err != nil {
		return nil, fmt.Errorf("listing versions of %s/%s in %s: %w", CommunityGallery, name, req.Location, err)
	}
	want := strings.TrimPrefix(v.String(), "v")
	if !contains(versions, want) {
		if req.Source == CommunityGallerySource {
			return nil, fmt.Errorf("the community gallery %s has no version %s of %s in %s; pick a Kubernetes version it publishes or set spec.image", CommunityGallery, want, name, req.Location)
		}
		return nil, nil
	}
	return &infrav1.Image{ComputeGallery: &infrav1.ComputeGalleryImage{Gallery: CommunityGallery, Name: name, Version: want}}, nil
}

// Candidates lists the SKUs to try for a request, best first, and says
// whether their versions are keyed by the Kubernetes version (new style) or
// the SKU itself names the version (old style).
func Candidates(v Version, req Request) (offer string, skus []string, newStyle bool) {
	offer = LinuxOffer
	if req.OS == infrav1.Windows {
		offer = WindowsOffer
	}
	if v.AtLeast(1, newSKUMinor) {
		return offer, newStyleSKUs(req), true
	}
	return offer, oldStyleSKUs(v, req), false
}

func newStyleSKUs(req Request) []string {
	if req.OS == infrav1.Windows {
		if req.Runtime == infrav1.Dockershim {
			return nil
		}
		return []string{fmt.Sprintf("windows-%s-containerd-gen1", req.WindowsVersion)}
	}
	return []string{"ubuntu-2404-gen1", "ubuntu-2204-gen1"}
}

func oldStyleSKUs(v Version, req Request) []string {
	dotted := fmt.Sprintf("k8s-%ddot%ddot%d", v.Major, v.Minor, v.Patch)
	if req.OS == infrav1.Windows {
		if req.Runtime == infrav1.Dockershim {
			return []string{fmt.Sprintf("%s-windows-%s", dotted, req.WindowsVersion)}
		}
		return []string{fmt.Sprintf("%s-windows-%s-containerd", dotted, req.WindowsVersion)}
	}
	return []string{dotted + "-ubuntu-2204", dotted + "-ubuntu-2004", dotted + "-ubuntu-1804"}
}

// VersionPrefix is how new-style image versions begin for a Kubernetes
// version: v1.28.12 -> "128.12.".
func VersionPrefix(v Version) string {
	return fmt.Sprintf("%d%d.%d.", v.Major, v.Minor, v.Patch)
}

func (r *Resolver) marketplaceImage(ctx context.Context, v Version, req Request) (*infrav1.Image, error) {
	offer, _, newStyle := Candidates(v, req)
	available, err := r.list(ctx, "skus", req.Location, offer, "")
	if err != nil {
		return nil, fmt.Errorf("listing %s:%s images in %s: %w", Publisher, offer, req.Location, err)
	}
	// Both SKU styles are tried, the version's own first: CAPZ published
	// some releases before v1.28 under the version-free SKUs too
	// (ubuntu-2204-gen1 127.14.20240517).
	sets := []struct {
		skus     []string
		newStyle bool
	}{{newStyleSKUs(req), true}, {oldStyleSKUs(v, req), false}}
	if !newStyle {
		sets[0], sets[1] = sets[1], sets[0]
	}
	var tried []string
	for _, set := range sets {
		for _, sku := range set.skus {
			tried = append(tried, sku)
			if !contains(available, sku) {
				continue
			}
			versions, err := r.list(ctx, "versions", req.Location, offer, sku)
			if err != nil {
				return nil, fmt.Errorf("listing versions of %s:%s:%s in %s: %w", Publisher, offer, sku, req.Location, err)
			}
			if set.newStyle {
				versions = withPrefix(versions, VersionPrefix(v))
			}
			if latest, ok := Newest(versions); ok {
				return &infrav1.Image{Marketplace: &infrav1.MarketplaceImage{
					Publisher: Publisher, Offer: offer, SKU: sku, Version: latest,
				}}, nil
			}
		}
	}
	what := string(req.OS)
	if req.OS == infrav1.Windows {
		what = fmt.Sprintf("Windows Server %s (%s)", req.WindowsVersion, req.Runtime)
	}
	return nil, fmt.Errorf("no %s image for Kubernetes %s in %s: %s:%s has none of the SKUs %s with such a version; pick another Kubernetes version or set spec.image",
		what, v, req.Location, Publisher, offer, strings.Join(tried, ", "))
}

func (r *Resolver) list(ctx context.Context, kind, location, offer, sku string) ([]string, error) {
	return r.cachedList(ctx, strings.Join([]string{kind, location, offer, sku}, "/"), func() ([]string, error) {
		if kind == "skus" {
			return r.lister.ListSKUs(ctx, location, Publisher, offer)
		}
		return r.lister.ListVersions(ctx, location, Publisher, offer, sku)
	})
}

// cachedList keeps what a listing returned for the TTL; errors are not kept.
func (r *Resolver) cachedList(_ context.Context, key string, fetch func() ([]string, error)) ([]string, error) {
	r.mu.Lock()
	c, ok := r.cache[key]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < r.ttl {
		return c.items, nil
	}
	items, err := fetch()
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

// Newest is the highest of dotted versions (1.10 above 1.9).
func Newest(versions []string) (string, bool) {
	if len(versions) == 0 {
		return "", false
	}
	sorted := append([]string(nil), versions...)
	sort.Slice(sorted, func(i, j int) bool { return dotted.Less(sorted[i], sorted[j]) })
	return sorted[len(sorted)-1], true
}
