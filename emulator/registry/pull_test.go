package registry_test

import (
	"context"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/winkube/winkube/emulator/registry"
)

// Pulls share one client, as a containerd keeps its registry state per
// host: N pulls of two repositories make no TLS attempt against the
// plain-HTTP registry and no new connection beyond the first pull of
// each repository (before, each pull pinged /v2/ over https and http on
// new connections).
func TestPullsReuseTheirConnections(t *testing.T) {
	ctx := context.Background()
	counts, restore := registry.CountConnections()
	defer restore()
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	refs := []string{"registry.k8s.io/pause:3.10.2", "mcr.microsoft.com/oss/kubernetes/pause:3.10.2"}
	for _, ref := range refs {
		if err := reg.Push(ctx, registry.Image{Ref: ref, Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}}}); err != nil {
			t.Fatal(err)
		}
	}
	tls0, plain0 := counts()
	const pulls = 20
	for i := range pulls {
		if _, err := reg.Lookup(ctx, refs[i%len(refs)]); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.HasRepository(ctx, refs[i%len(refs)]); err != nil {
			t.Fatal(err)
		}
	}
	tls, plain := counts()
	tls, plain = tls-tls0, plain-plain0
	// The first pull of each repository pings it once over both
	// schemes; every later request reuses the plain connection.
	if tls > int64(len(refs)) || plain > int64(len(refs))+1 {
		t.Fatalf("%d pulls of %d repositories opened %d TLS handshakes and %d plain connections, want at most %d and %d",
			pulls, len(refs), tls, plain, len(refs), len(refs)+1)
	}
}
