package registry_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/winkube/winkube/emulator/registry"
)

// Another user of the machine reaches the registry's loopback port: it may
// pull, but its pushes, of a new repository or over one of the world's
// images, are refused with the distribution specification's 401 and
// challenge, and the catalog and the image stay as they were.
func TestAnonymousPushesAreRefused(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	const pause = "registry.k8s.io/pause:3.10.2"
	if err := reg.Push(ctx, registry.Image{Ref: pause, Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}}}); err != nil {
		t.Fatalf("the registry's own push: %v", err)
	}
	before, err := reg.Lookup(ctx, pause)
	if err != nil || before == nil {
		t.Fatalf("lookup: %v %v", before, err)
	}
	catalog := func() string {
		resp, err := http.Get("http://" + reg.Host() + "/v2/_catalog")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	catalogBefore := catalog()

	// Raw requests, as curl would send them.
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPut, "/v2/registry.k8s.io/pause/manifests/3.10.2", `{"schemaVersion":2}`},
		{http.MethodPut, "/v2/evil/app/manifests/latest", `{"schemaVersion":2}`},
		{http.MethodPost, "/v2/registry.k8s.io/pause/blobs/uploads/", ""},
		{http.MethodDelete, "/v2/registry.k8s.io/pause/manifests/" + before.Digest, ""},
	} {
		r, _ := http.NewRequest(req.method, "http://"+reg.Host()+req.path, strings.NewReader(req.body))
		r.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic realm=") || !strings.Contains(string(b), `"code":"UNAUTHORIZED"`) {
			t.Errorf("anonymous %s %s: %d %q %s, want 401 with a challenge and UNAUTHORIZED", req.method, req.path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b)
		}
	}
	// A client that answers the challenge with a guessed password.
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	over, _ := name.ParseReference(reg.Host()+"/registry.k8s.io/pause:3.10.2", name.Insecure)
	for _, auth := range []authn.Authenticator{authn.Anonymous, &authn.Basic{Username: "winkube", Password: "guess"}} {
		if err := remote.Write(over, img, remote.WithAuth(auth)); err == nil {
			t.Errorf("a push over the world's pause image with %T was accepted", auth)
		}
	}

	after, err := reg.Lookup(ctx, pause)
	if err != nil || after == nil || after.Digest != before.Digest {
		t.Fatalf("the pause image changed: %+v -> %+v (%v)", before, after, err)
	}
	if got := catalog(); got != catalogBefore {
		t.Fatalf("the catalog changed: %s -> %s", catalogBefore, got)
	}
}
