package registry_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/winkube/winkube/emulator/registry"
)

// TestCanonicalAndRepository: references as the kubelet reports them
// (docker.io and library/ filled in, :latest added, a digest kept), and the
// repository without tag or digest, a registry's port not taken for a tag.
func TestCanonicalAndRepository(t *testing.T) {
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	for _, c := range []struct{ ref, canonical, repository string }{
		{"nginx", "docker.io/library/nginx:latest", "docker.io/library/nginx"},
		{"nginx:1.27", "docker.io/library/nginx:1.27", "docker.io/library/nginx"},
		{"calico/node:v3.30.3", "docker.io/calico/node:v3.30.3", "docker.io/calico/node"},
		{"index.docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36", "docker.io/library/busybox"},
		{"registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause"},
		{"localhost:5000/app", "localhost:5000/app:latest", "localhost:5000/app"},
		{"localhost:5000/app@" + digest, "localhost:5000/app@" + digest, "localhost:5000/app"},
		{"mcr.microsoft.com/windows/servercore:ltsc2022", "mcr.microsoft.com/windows/servercore:ltsc2022", "mcr.microsoft.com/windows/servercore"},
		// Not a reference: kept as written, as the kubelet reports what
		// it cannot parse.
		{"UPPER/case:x", "UPPER/case:x", "UPPER/case"},
	} {
		if got := registry.Canonical(c.ref); got != c.canonical {
			t.Errorf("Canonical(%q) = %q, want %q", c.ref, got, c.canonical)
		}
		if got := registry.Repository(c.ref); got != c.repository {
			t.Errorf("Repository(%q) = %q, want %q", c.ref, got, c.repository)
		}
	}
}

// TestBaseFiles: which base an image's files come from, and what is
// assumed of an image the catalog does not know.
func TestBaseFiles(t *testing.T) {
	for _, c := range []struct {
		ref, os string
		has     string // a file the base holds; "" for none at all
		assumed bool
	}{
		{"mcr.microsoft.com/windows/nanoserver:ltsc2022", "windows", "", false},
		{"mcr.microsoft.com/windows/servercore:ltsc2022", "windows", "powershell", false},
		{"mcr.microsoft.com/windows/servercore/iis:latest", "windows", "powershell", false},
		{"registry.example.com/app:1", "windows", "powershell", true},
		{"busybox:1.36", "linux", "sh", false},
		{"nginx:1.27", "linux", "sh", false},
		{"registry.k8s.io/kube-proxy:v1.36.3", "linux", "", false},
		{"registry.example.com/app:1", "linux", "sh", true},
	} {
		files, assumed := registry.BaseFiles(c.ref, c.os)
		if (assumed != "") != c.assumed {
			t.Errorf("%s on %s: assumed %q, want an assumption: %v", c.ref, c.os, assumed, c.assumed)
		}
		has := slices.ContainsFunc(files, func(f string) bool { return strings.Contains(strings.ToLower(f), c.has) })
		switch {
		case c.ref == "registry.k8s.io/kube-proxy:v1.36.3" && len(files) != 0:
			t.Errorf("%s: distroless, yet files %v", c.ref, files)
		case c.has != "" && !has:
			t.Errorf("%s on %s: no %s in %v", c.ref, c.os, c.has, files)
		case c.has == "" && c.os == "windows" && slices.ContainsFunc(files, func(f string) bool { return strings.Contains(strings.ToLower(f), "powershell") }):
			t.Errorf("%s: nanoserver has cmd only, yet %v", c.ref, files)
		}
	}
}

// TestCatalogPlatforms: the Windows builds each image of the catalog is
// published for, as the real image is, which decides whether a node of a
// build can pull it ("no matching manifest").
func TestCatalogPlatforms(t *testing.T) {
	byRef := map[string][]v1.Platform{}
	for _, img := range registry.Catalog("v1.36.3", []string{"registry.k8s.io/kube-proxy:v1.36.3"}) {
		byRef[img.Ref] = img.Platforms
	}
	builds := func(ps []v1.Platform) string {
		var out []string
		for _, p := range ps {
			s := p.OS + "/" + p.Architecture
			if p.OSVersion != "" {
				s += "/" + p.OSVersion
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct{ ref, want string }{
		{"registry.k8s.io/kube-proxy:v1.36.3", "linux/amd64 linux/arm64"},
		{"mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019", "windows/amd64/" + registry.Build2019},
		{"mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022", "windows/amd64/" + registry.Build2022},
		{"mcr.microsoft.com/windows/servercore/iis:latest", "windows/amd64/" + registry.Build2019 + " windows/amd64/" + registry.Build2022 + " windows/amd64/" + registry.Build2025},
		{"docker.io/calico/node-windows:" + registry.CalicoVersion, "windows/amd64/" + registry.Build2019 + " windows/amd64/" + registry.Build2022},
		// HostProcess images carry no build: they run on any.
		{"docker.io/sigwindowstools/kube-proxy:v1.36.3-calico-hostprocess", "windows/amd64"},
		{"mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0", "windows/amd64"},
	} {
		ps, ok := byRef[c.ref]
		if !ok {
			t.Errorf("%s is not in the catalog", c.ref)
			continue
		}
		if got := builds(ps); got != c.want {
			t.Errorf("%s is published for %s, want %s", c.ref, got, c.want)
		}
	}
}

// TestPushedPlatformsAreLookedUp: what Push publishes, one manifest or an
// index, Lookup reads back with its platforms, the ports and what it
// provides, through a registry on loopback (no world).
func TestPushedPlatformsAreLookedUp(t *testing.T) {
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	ctx := context.Background()
	for _, img := range []registry.Image{
		{Ref: "example.com/table/one:1", Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}}, Listens: []string{"8080/tcp"}},
		{Ref: "example.com/table/multi:1", Platforms: []v1.Platform{{OS: "windows", Architecture: "amd64", OSVersion: registry.Build2019}, {OS: "windows", Architecture: "amd64", OSVersion: registry.Build2022}}, Provides: "cni"},
	} {
		if err := reg.Push(ctx, img); err != nil {
			t.Fatalf("push %s: %v", img.Ref, err)
		}
		m, err := reg.Lookup(ctx, img.Ref)
		if err != nil {
			t.Fatalf("lookup %s: %v", img.Ref, err)
		}
		if len(m.Platforms) != len(img.Platforms) || m.Provides != img.Provides || !slices.Equal(m.Listens, img.Listens) || !strings.HasPrefix(m.Digest, "sha256:") {
			t.Errorf("%s: looked up %+v, pushed %+v", img.Ref, m, img)
		}
		for i, p := range img.Platforms {
			if i < len(m.Platforms) && (m.Platforms[i].OS != p.OS || m.Platforms[i].OSVersion != p.OSVersion) {
				t.Errorf("%s: platform %d is %+v, want %+v", img.Ref, i, m.Platforms[i], p)
			}
		}
	}
	if _, err := reg.Lookup(ctx, "example.com/table/absent:1"); err != registry.ErrNotFound {
		t.Errorf("lookup of an absent image: %v, want ErrNotFound", err)
	}
}
