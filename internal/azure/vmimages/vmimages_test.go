package vmimages_test

import (
	"context"
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
	for _, tc := range []struct {
		req     images.Request
		sku     string
		version string
	}{
		{images.Request{Location: "westeurope", KubernetesVersion: "v1.36.3", OS: infrav1.Windows, WindowsVersion: "2025"}, "windows-2025-containerd-gen1", "136.3.20260424"},
		{images.Request{Location: "westeurope", KubernetesVersion: "v1.22.1", OS: infrav1.Windows, WindowsVersion: "2019"}, "k8s-1dot22dot1-windows-2019-containerd", "2021.02.24"},
		{images.Request{Location: "eastus", KubernetesVersion: "v1.36.3"}, "ubuntu-2404-gen1", "136.3.20260424"},
	} {
		img, err := r.Resolve(context.Background(), nil, tc.req)
		if err != nil {
			t.Fatalf("%+v: %v", tc.req, err)
		}
		if img.Marketplace.SKU != tc.sku || img.Marketplace.Version != tc.version {
			t.Errorf("%+v: got %s %s, want %s %s", tc.req, img.Marketplace.SKU, img.Marketplace.Version, tc.sku, tc.version)
		}
	}
	if _, err := r.Resolve(context.Background(), nil, images.Request{Location: "mars", KubernetesVersion: "v1.36.3"}); err == nil {
		t.Fatal("an unknown location resolved")
	}
}
