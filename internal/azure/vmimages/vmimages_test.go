package vmimages_test

import (
	"context"
	"strings"
	"testing"
	"time"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/vmimages"
	"github.com/winkube/winkube/internal/images"
)

// The default-image resolver, listing through the real SDK against the
// emulator's catalog, picks the newest build of the exact Kubernetes version.
func TestResolverOverTheEmulatorsCatalog(t *testing.T) {
	srv, err := arm.New(arm.Options{Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	l, err := vmimages.New("sub", endpoint.Config{ResourceManagerEndpoint: srv.URL(), CACertPEM: srv.CACertPEM(), Credential: endpoint.StaticToken("t")})
	if err != nil {
		t.Fatal(err)
	}
	r := images.NewResolver(l, time.Hour)
	gallery := func(name, version string) infrav1.Image {
		return infrav1.Image{ComputeGallery: &infrav1.ComputeGalleryImage{Gallery: images.CommunityGallery, Name: name, Version: version}}
	}
	market := func(offer, sku, version string) infrav1.Image {
		return infrav1.Image{Marketplace: &infrav1.MarketplaceImage{Publisher: images.Publisher, Offer: offer, SKU: sku, Version: version}}
	}
	for _, tc := range []struct {
		name string
		req  images.Request
		want infrav1.Image
	}{
		{"the gallery where it publishes the release", images.Request{Location: "westeurope", KubernetesVersion: "v1.36.3", OS: infrav1.Windows, WindowsVersion: "2025"},
			gallery("capi-win-2025-containerd", "1.36.3")},
		{"Windows defaults to 2022", images.Request{Location: "westeurope", KubernetesVersion: "v1.31.1", OS: infrav1.Windows},
			gallery("capi-win-2022-containerd", "1.31.1")},
		{"Linux from the gallery", images.Request{Location: "eastus", KubernetesVersion: "v1.36.3"},
			gallery("capi-ubun2-2404", "1.36.3")},
		{"the marketplace for releases before the gallery", images.Request{Location: "westeurope", KubernetesVersion: "v1.29.7", OS: infrav1.Windows, WindowsVersion: "2019"},
			market(images.WindowsOffer, "windows-2019-containerd-gen1", "129.7.20240717")},
		{"the seeds' containerd URN", images.Request{Location: "westeurope", KubernetesVersion: "v1.22.1", OS: infrav1.Windows, WindowsVersion: "2019"},
			market(images.WindowsOffer, "k8s-1dot22dot1-windows-2019-containerd", "2021.10.15")},
		{"the seeds' dockershim URN", images.Request{Location: "westeurope", KubernetesVersion: "v1.18.13", OS: infrav1.Windows, WindowsVersion: "2019", Runtime: infrav1.Dockershim},
			market(images.WindowsOffer, "k8s-1dot18dot13-windows-2019", "2020.12.11")},
		{"Linux marketplace before the gallery", images.Request{Location: "westeurope", KubernetesVersion: "v1.30.3"},
			market(images.LinuxOffer, "ubuntu-2204-gen1", "130.3.20240717")},
	} {
		img, err := r.Resolve(context.Background(), nil, tc.req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got, want := describe(img), describe(&tc.want); got != want {
			t.Errorf("%s: got %s, want %s", tc.name, got, want)
		}
	}
	// Nothing published: a clear error naming both sources and the way out.
	_, err = r.Resolve(context.Background(), nil, images.Request{Location: "westeurope", KubernetesVersion: "v1.36.9", OS: infrav1.Windows})
	if err == nil || !strings.Contains(err.Error(), "capi-win-2022-containerd") || !strings.Contains(err.Error(), "spec.image") || !strings.Contains(err.Error(), "windows-2022-containerd-gen1") {
		t.Fatalf("error %v, want one naming the gallery image, the SKU and spec.image", err)
	}
	if _, err := r.Resolve(context.Background(), nil, images.Request{Location: "mars", KubernetesVersion: "v1.36.3"}); err == nil {
		t.Fatal("an unknown location resolved")
	}
	// The marketplace alone has no v1.36 image: the offers are deprecated.
	if _, err := r.Resolve(context.Background(), nil, images.Request{Location: "westeurope", KubernetesVersion: "v1.36.3", Source: images.Marketplace}); err == nil {
		t.Fatal("the marketplace resolved a release CAPZ publishes only in its gallery")
	}
}

func describe(img *infrav1.Image) string {
	if g := img.ComputeGallery; g != nil {
		return "gallery " + g.Gallery + "/" + g.Name + "/" + g.Version
	}
	m := img.Marketplace
	return "marketplace " + m.Publisher + ":" + m.Offer + ":" + m.SKU + ":" + m.Version
}
