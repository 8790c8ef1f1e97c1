package images

import (
	"context"
	"errors"
	"github.com/winkube/winkube/emulator/arm"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"v1.36.3":      {1, 36, 3},
		"1.22.1":       {1, 22, 1},
		"v1.30.0-rc.1": {1, 30, 0},
		"v1.29.2+k3s1": {1, 29, 2},
	} {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.36", "v2.0.0", "v1.x.3", "latest", "v1.036.1"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted it", bad)
		}
	}
}

func TestValidateRuntime(t *testing.T) {
	v := func(s string) Version {
		x, err := ParseVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, tc := range []struct {
		name    string
		version string
		os      infrav1.OSType
		win     infrav1.WindowsServerVersion
		rt      infrav1.ContainerRuntime
		wantErr string
	}{
		{"dockershim refused from 1.24", "v1.24.0", infrav1.Windows, "2019", infrav1.Dockershim, "removed in Kubernetes v1.24"},
		{"dockershim refused on Linux too", "v1.30.1", infrav1.Linux, "", infrav1.Dockershim, "removed"},
		{"dockershim fine on 1.23", "v1.23.5", infrav1.Windows, "2019", infrav1.Dockershim, ""},
		{"windows containerd needs 1.22", "v1.21.2", infrav1.Windows, "2019", infrav1.Containerd, "v1.22"},
		{"windows containerd on 1.22", "v1.22.1", infrav1.Windows, "2019", infrav1.Containerd, ""},
		{"windows 2022 before its images", "v1.22.1", infrav1.Windows, "2022", infrav1.Containerd, "no Windows Server 2022 images"},
		{"windows 2025 before its images", "v1.30.1", infrav1.Windows, "2025", infrav1.Containerd, "no Windows Server 2025 images"},
		{"windows 2025 on 1.36", "v1.36.3", infrav1.Windows, "2025", "", ""},
		{"linux containerd old", "v1.18.0", infrav1.Linux, "", infrav1.Containerd, ""},
	} {
		err := ValidateRuntime(v(tc.version), tc.os, tc.win, tc.rt)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestHostProcessFeatureGateOnlyBefore126(t *testing.T) {
	for s, want := range map[string]bool{"v1.21.9": false, "v1.22.1": true, "v1.25.16": true, "v1.26.0": false, "v1.36.3": false} {
		v, _ := ParseVersion(s)
		if got := NeedsHostProcessFeatureGate(v); got != want {
			t.Errorf("NeedsHostProcessFeatureGate(%s) = %v, want %v", s, got, want)
		}
	}
}

// published is a marketplace catalog of a few URNs of each SKU style.
var published = Catalog{
	{Publisher: Publisher, Offer: WindowsOffer, SKU: "k8s-1dot22dot1-windows-2019-containerd", Version: "2021.10.15", OS: infrav1.Windows},
	{Publisher: Publisher, Offer: WindowsOffer, SKU: "k8s-1dot20dot0-windows-2019", Version: "2020.12.11", OS: infrav1.Windows},
	{Publisher: Publisher, Offer: WindowsOffer, SKU: "windows-2019-containerd-gen1", Version: "130.2.20240612", OS: infrav1.Windows},
	{Publisher: Publisher, Offer: WindowsOffer, SKU: "windows-2019-containerd-gen1", Version: "130.1.20240515", OS: infrav1.Windows},
	{Publisher: Publisher, Offer: WindowsOffer, SKU: "windows-2022-containerd-gen1", Version: "136.3.20260424", OS: infrav1.Windows},
	{Publisher: Publisher, Offer: LinuxOffer, SKU: "ubuntu-2204-gen1", Version: "127.14.20240517", OS: infrav1.Linux},
	{Publisher: Publisher, Offer: LinuxOffer, SKU: "ubuntu-2204-gen1", Version: "129.1.20240206", OS: infrav1.Linux},
	{Publisher: Publisher, Offer: LinuxOffer, SKU: "ubuntu-2404-gen1", Version: "136.3.20260424", OS: infrav1.Linux},
}

func TestResolveMarketplaceDefaults(t *testing.T) {
	r := NewResolver(published, time.Hour)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  Request
		want infrav1.MarketplaceImage
	}{
		{"windows defaults to 2022", Request{KubernetesVersion: "v1.36.3", OS: infrav1.Windows},
			infrav1.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: "windows-2022-containerd-gen1", Version: "136.3.20260424"}},
		{"newest build of the exact patch", Request{KubernetesVersion: "v1.30.2", OS: infrav1.Windows, WindowsVersion: "2019"},
			infrav1.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: "windows-2019-containerd-gen1", Version: "130.2.20240612"}},
		{"old-style containerd SKU of the seeds", Request{KubernetesVersion: "v1.22.1", OS: infrav1.Windows, WindowsVersion: "2019"},
			infrav1.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: "k8s-1dot22dot1-windows-2019-containerd", Version: "2021.10.15"}},
		{"old-style dockershim SKU", Request{KubernetesVersion: "v1.20.0", OS: infrav1.Windows, WindowsVersion: "2019", Runtime: infrav1.Dockershim},
			infrav1.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: "k8s-1dot20dot0-windows-2019", Version: "2020.12.11"}},
		{"linux new style prefers 24.04", Request{KubernetesVersion: "v1.36.3"},
			infrav1.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2404-gen1", Version: "136.3.20260424"}},
		{"linux falls back to 22.04", Request{KubernetesVersion: "v1.29.1"},
			infrav1.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2204-gen1", Version: "129.1.20240206"}},
		{"a release before v1.28 under a version-free SKU", Request{KubernetesVersion: "v1.27.14"},
			infrav1.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2204-gen1", Version: "127.14.20240517"}},
	} {
		img, err := r.Resolve(ctx, nil, tc.req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if img.Marketplace == nil || *img.Marketplace != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, img.Marketplace, tc.want)
		}
	}
}

func TestVersionIsChosenByPrefixNotLatest(t *testing.T) {
	// 128.1.x must not be picked for v1.28.12 even though "128.1." is a
	// string prefix of "128.12." in the other direction.
	cat := Catalog{
		{Publisher: Publisher, Offer: WindowsOffer, SKU: "windows-2019-containerd-gen1", Version: "128.1.20250101"},
		{Publisher: Publisher, Offer: WindowsOffer, SKU: "windows-2019-containerd-gen1", Version: "128.12.20240717"},
		{Publisher: Publisher, Offer: WindowsOffer, SKU: "windows-2019-containerd-gen1", Version: "128.12.20240601"},
		{Publisher: Publisher, Offer: WindowsOffer, SKU: "windows-2019-containerd-gen1", Version: "129.0.20250301"},
	}
	img, err := NewResolver(cat, time.Hour).Resolve(context.Background(), nil,
		Request{KubernetesVersion: "v1.28.12", OS: infrav1.Windows, WindowsVersion: "2019"})
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Marketplace.Version; got != "128.12.20240717" {
		t.Fatalf("version %s, want 128.12.20240717 (the newest build of 1.28.12)", got)
	}
}

func TestExplicitImageWins(t *testing.T) {
	id := "/subscriptions/x/resourceGroups/y/providers/Microsoft.Compute/images/mine"
	explicit := &infrav1.Image{ID: &id}
	// Even a request that would be refused returns the user's image.
	got, err := NewResolver(Catalog{}, time.Hour).Resolve(context.Background(), explicit, Request{KubernetesVersion: "not a version"})
	if err != nil || got != explicit {
		t.Fatalf("Resolve = %v, %v; want the explicit image", got, err)
	}
}

func TestMissingImageSaysWhatToDo(t *testing.T) {
	_, err := NewResolver(published, time.Hour).Resolve(context.Background(), nil,
		Request{Location: "westeurope", KubernetesVersion: "v1.36.9", OS: infrav1.Windows, WindowsVersion: "2022"})
	if err == nil || !strings.Contains(err.Error(), "set spec.image") || !strings.Contains(err.Error(), "v1.36.9") {
		t.Fatalf("error %v, want one naming the version and pointing at spec.image", err)
	}
}

func TestCommunityGalleryNeedsAGalleryLister(t *testing.T) {
	_, err := NewResolver(published, time.Hour).Resolve(context.Background(), nil,
		Request{KubernetesVersion: "v1.36.3", OS: infrav1.Windows, WindowsVersion: "2025", Source: CommunityGallerySource})
	if err == nil || !strings.Contains(err.Error(), CommunityGallery) {
		t.Fatalf("error %v, want one saying the gallery cannot be listed", err)
	}
}

type countingLister struct {
	Lister
	calls atomic.Int32
	fail  error
}

func (c *countingLister) ListSKUs(ctx context.Context, loc, pub, offer string) ([]string, error) {
	c.calls.Add(1)
	if c.fail != nil {
		return nil, c.fail
	}
	return c.Lister.ListSKUs(ctx, loc, pub, offer)
}

func (c *countingLister) ListVersions(ctx context.Context, loc, pub, offer, sku string) ([]string, error) {
	c.calls.Add(1)
	return c.Lister.ListVersions(ctx, loc, pub, offer, sku)
}

func TestListingsAreCachedUntilTTL(t *testing.T) {
	l := &countingLister{Lister: published}
	r := NewResolver(l, time.Minute)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	req := Request{Location: "westeurope", KubernetesVersion: "v1.36.3", OS: infrav1.Windows}
	for i := 0; i < 5; i++ {
		if _, err := r.Resolve(context.Background(), nil, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("%d catalog calls for 5 resolutions, want 2 (SKUs and versions, once)", n)
	}
	now = now.Add(2 * time.Minute)
	if _, err := r.Resolve(context.Background(), nil, req); err != nil {
		t.Fatal(err)
	}
	if n := l.calls.Load(); n != 4 {
		t.Fatalf("%d catalog calls after the TTL, want 4", n)
	}
}

func TestListingErrorsAreNotCached(t *testing.T) {
	l := &countingLister{Lister: published, fail: errors.New("throttled")}
	r := NewResolver(l, time.Hour)
	req := Request{KubernetesVersion: "v1.36.3"}
	if _, err := r.Resolve(context.Background(), nil, req); err == nil || !strings.Contains(err.Error(), "throttled") {
		t.Fatalf("error %v, want the listing error", err)
	}
	l.fail = nil
	if _, err := r.Resolve(context.Background(), nil, req); err != nil {
		t.Fatalf("a failed listing was cached: %v", err)
	}
}

func TestReferenceCatalogIsTheEmulatorsMarketplace(t *testing.T) {
	skus, _ := ReferenceCatalog().ListSKUs(context.Background(), "", Publisher, WindowsOffer)
	for _, want := range []string{"k8s-1dot22dot1-windows-2019-containerd", "k8s-1dot18dot13-windows-2019", "windows-2019-containerd-gen1"} {
		if !contains(skus, want) {
			t.Errorf("reference catalog lacks SKU %s (has %v)", want, skus)
		}
	}
	versions, _ := ReferenceCatalog().ListVersions(context.Background(), "", Publisher, WindowsOffer, "k8s-1dot22dot1-windows-2019-containerd")
	if len(versions) != 1 || versions[0] != "2021.10.15" {
		t.Errorf("versions of the seeds' containerd SKU %v, want [2021.10.15]", versions)
	}
}

// ReferenceCatalog is the marketplace part of the catalog the ARM emulator
// publishes, as a Lister: the tests' stand-in for an ARM endpoint. It lives
// here so that the resolver the controllers run does not depend on the
// emulator.
func ReferenceCatalog() Catalog {
	var c Catalog
	for _, im := range arm.DefaultCatalog().Marketplace {
		c = append(c, CatalogImage{Publisher: im.Publisher, Offer: im.Offer, SKU: im.SKU, Version: im.Version, OS: infrav1.OSType(im.OS)})
	}
	return c
}

// A default image stays the pool's through newer builds of it, and is no
// longer its default once the request asks for another image.
func TestIsDefaultFor(t *testing.T) {
	mkt := func(offer, sku, version string) *infrav1.Image {
		return &infrav1.Image{Marketplace: &infrav1.MarketplaceImage{Publisher: Publisher, Offer: offer, SKU: sku, Version: version}}
	}
	gallery := func(name, version string) *infrav1.Image {
		return &infrav1.Image{ComputeGallery: &infrav1.ComputeGalleryImage{Gallery: CommunityGallery, Name: name, Version: version}}
	}
	linux131 := Request{KubernetesVersion: "v1.31.1"}
	win131 := Request{KubernetesVersion: "v1.31.1", OS: infrav1.Windows}
	for _, c := range []struct {
		name string
		img  *infrav1.Image
		req  Request
		want bool
	}{
		{"an older build of the same release", mkt(LinuxOffer, "ubuntu-2404-gen1", "131.1.20240101"), linux131, true},
		{"the other version-free Linux SKU", mkt(LinuxOffer, "ubuntu-2204-gen1", "131.1.20250101"), linux131, true},
		{"a build of another Kubernetes release", mkt(LinuxOffer, "ubuntu-2404-gen1", "130.4.20240101"), linux131, false},
		{"a Kubernetes patch upgrade", mkt(LinuxOffer, "ubuntu-2404-gen1", "131.1.20240101"), Request{KubernetesVersion: "v1.31.2"}, false},
		{"the Windows SKU of the default Windows Server", mkt(WindowsOffer, "windows-2022-containerd-gen1", "131.1.20240101"), win131, true},
		{"another Windows Server than asked", mkt(WindowsOffer, "windows-2019-containerd-gen1", "131.1.20240101"), win131, false},
		{"a Linux image for a Windows pool", mkt(LinuxOffer, "ubuntu-2404-gen1", "131.1.20240101"), win131, false},
		{"an old-style SKU names its release", mkt(LinuxOffer, "k8s-1dot22dot1-ubuntu-2004", "2021.08.01"), Request{KubernetesVersion: "v1.22.1"}, true},
		{"an old-style SKU of another release", mkt(LinuxOffer, "k8s-1dot22dot1-ubuntu-2004", "2021.08.01"), Request{KubernetesVersion: "v1.22.2"}, false},
		{"another publisher's image", &infrav1.Image{Marketplace: &infrav1.MarketplaceImage{Publisher: "someone", Offer: LinuxOffer, SKU: "ubuntu-2404-gen1", Version: "131.1.1"}}, linux131, false},
		{"the community gallery's image of the release", gallery("capi-ubun2-2404", "1.31.1"), linux131, true},
		{"the gallery's Windows image", gallery("capi-win-2022-containerd", "1.31.1"), win131, true},
		{"the gallery's image of another release", gallery("capi-ubun2-2404", "1.31.0"), linux131, false},
		{"an image by ID", &infrav1.Image{ID: ptrTo("/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/images/i")}, linux131, false},
		{"nothing pinned", nil, linux131, false},
	} {
		if got := IsDefaultFor(c.img, c.req); got != c.want {
			t.Errorf("%s: IsDefaultFor = %v, want %v", c.name, got, c.want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
