package registry_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/registry"
)

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// TestUpstreamTestImagesAsPublished: the e2e's test images and the pause
// tags are served with their manifest lists (Linux, and Windows variants
// of the builds their build files name) and each OS's process as their
// Dockerfiles set it; each records a published digest with its source, or
// says why it has none, and the digest served (computed from the recorded
// manifests) is never passed off as the published one.
func TestUpstreamTestImagesAsPublished(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	want := map[string]struct {
		builds     []string
		entrypoint map[string][]string
		cmd        map[string][]string
		user       map[string]string
	}{
		"registry.k8s.io/pause:3.10":                       {[]string{registry.Build2019, registry.Build2022}, map[string][]string{"linux": {"/pause"}, "windows": {"/pause.exe"}}, nil, nil},
		"registry.k8s.io/pause:3.10.1":                     {[]string{registry.Build2019, registry.Build2022}, map[string][]string{"linux": {"/pause"}, "windows": {"/pause.exe"}}, nil, nil},
		"registry.k8s.io/pause:3.10.2":                     {[]string{registry.Build2019, registry.Build2022, registry.Build2025}, map[string][]string{"linux": {"/pause"}, "windows": {"/pause.exe"}}, nil, nil},
		"registry.k8s.io/e2e-test-images/agnhost:2.63.0":   {[]string{registry.Build2019, registry.Build2022, registry.Build2025}, map[string][]string{"linux": {"/agnhost"}, "windows": {"/agnhost"}}, map[string][]string{"linux": {"pause"}, "windows": {"pause"}}, nil},
		"registry.k8s.io/e2e-test-images/busybox:1.37.0-1": {[]string{registry.Build2019, registry.Build2022}, map[string][]string{"windows": {"cmd.exe", "/s", "/c"}}, map[string][]string{"linux": {"sh"}}, nil},
		"registry.k8s.io/e2e-test-images/nginx:1.15-4":     {[]string{registry.Build2019, registry.Build2022}, map[string][]string{"windows": {"/bin/sh", "-c", " cd /usr/share/nginx && ./nginx.exe"}}, map[string][]string{"linux": {"nginx", "-g", "daemon off;"}}, nil},
		// The SecurityContext specs' image: no process of its own but
		// its USER, which the Windows specs print as %USERNAME%.
		"registry.k8s.io/e2e-test-images/nonroot:1.5": {[]string{registry.Build2019, registry.Build2022}, nil, nil, map[string]string{"linux": "1234", "windows": "ContainerUser"}},
	}
	ups := registry.UpstreamTestImages()
	if len(ups) != len(want) {
		t.Fatalf("%d upstream images, want %d", len(ups), len(want))
	}
	for _, u := range ups {
		w, ok := want[u.Ref]
		if !ok {
			t.Errorf("unexpected image %s", u.Ref)
			continue
		}
		if err := reg.Push(ctx, u.Image); err != nil {
			t.Fatal(err)
		}
		m, err := reg.Lookup(ctx, u.Ref)
		if err != nil {
			t.Fatalf("%s: %v", u.Ref, err)
		}
		var builds []string
		linux := false
		for _, p := range m.Platforms {
			switch p.OS {
			case "windows":
				builds = append(builds, p.OSVersion)
			case "linux":
				linux = linux || p.Architecture == "amd64"
			}
		}
		if !linux || !slices.Equal(builds, w.builds) {
			t.Errorf("%s: served platforms %+v, want linux/amd64 and Windows %v", u.Ref, m.Platforms, w.builds)
		}
		for _, os := range []string{"linux", "windows"} {
			pr := m.Process[os]
			if !slices.Equal(pr.Entrypoint, w.entrypoint[os]) || !slices.Equal(pr.Cmd, w.cmd[os]) || pr.User != w.user[os] {
				t.Errorf("%s on %s: served %v %v user %q, want entrypoint %v cmd %v user %q", u.Ref, os, pr.Entrypoint, pr.Cmd, pr.User, w.entrypoint[os], w.cmd[os], w.user[os])
			}
		}
		switch {
		case u.Digest != "" && !digestRE.MatchString(u.Digest):
			t.Errorf("%s: published digest %q is no digest", u.Ref, u.Digest)
		case u.Digest != "" && u.Digest == m.Digest:
			t.Errorf("%s: the served digest %s is the published one: the served manifests are recorded ones", u.Ref, m.Digest)
		case u.DigestSource == "" || u.Source == "" || !strings.Contains(u.Source, "@"):
			t.Errorf("%s: digest source %q, source %q: each must be cited", u.Ref, u.DigestSource, u.Source)
		}
	}
}
