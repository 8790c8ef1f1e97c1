package registry_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/winkube/winkube/emulator/registry"
)

// fileLayer is a layer holding files, by path inside the tar.
func fileLayer(t *testing.T, files ...string) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f, Mode: 0o755, Size: 4, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte("MZ\x90\x00"))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// windowsApp is a Windows Server 2022 image as a build makes it: random
// layers, then one with its program (in a Windows layer's Files/ tree),
// and a config with os.version, Entrypoint, Cmd, WorkingDir, Env and an
// exposed port.
func windowsApp(t *testing.T, build string) v1.Image {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.AppendLayers(img, fileLayer(t, "Files/app/app.exe", "Hives/DefaultUser_Delta")); err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.OSVersion = "windows", "amd64", build
	cfg.Config.Entrypoint = []string{`C:\app\app.exe`}
	cfg.Config.Cmd = []string{"--serve"}
	cfg.Config.WorkingDir = `C:\app`
	cfg.Config.Env = []string{"APP_MODE=test"}
	cfg.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	return img
}

// startWithPush is a registry with its push socket.
func startWithPush(t *testing.T) (*registry.Registry, *registry.Pusher, string) {
	t.Helper()
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	sock := filepath.Join(t.TempDir(), registry.PushSocket)
	if err := reg.ServePush(sock); err != nil {
		t.Fatal(err)
	}
	return reg, registry.NewPusher(reg.Host(), sock), sock
}

// writeLayout writes an OCI layout holding the index of a 2019 and a 2022
// build of the app, named as BuildKit names it.
func writeLayout(t *testing.T, dir, ref string, img2019, img2022 v1.Image) {
	t.Helper()
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: img2019, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "windows", Architecture: "amd64", OSVersion: registry.Build2019}}},
		mutate.IndexAddendum{Add: img2022, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "windows", Architecture: "amd64", OSVersion: registry.Build2022}}})
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": "1.0"})); err != nil {
		t.Fatal(err)
	}
}

// tarDir writes dir as a tar, as `docker buildx --output type=oci` does.
func tarDir(t *testing.T, dir, dst string) {
	t.Helper()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLoadEachFormat: an image from a docker save tarball, an OCI layout
// and an OCI archive is published through the push socket under its own
// name, with its manifest list, platforms and config as built, and a pull
// learns its platforms, process and ports as it does a catalog image's.
func TestLoadEachFormat(t *testing.T) {
	ctx := context.Background()
	reg, pusher, _ := startWithPush(t)
	dir := t.TempDir()
	app2019, app2022 := windowsApp(t, registry.Build2019), windowsApp(t, registry.Build2022)

	saved := filepath.Join(dir, "saved.tar")
	tag, _ := name.NewTag("example.com/team/app:2022")
	if err := tarball.WriteToFile(saved, tag, app2022); err != nil {
		t.Fatal(err)
	}
	lay := filepath.Join(dir, "layout")
	writeLayout(t, lay, "example.com/team/app:multi", app2019, app2022)
	archive := filepath.Join(dir, "oci.tar")
	writeLayout(t, filepath.Join(dir, "archived"), "example.com/team/app:archived", app2019, app2022)
	tarDir(t, filepath.Join(dir, "archived"), archive)

	for _, c := range []struct {
		path, ref, format string
		platforms         []string
	}{
		{saved, "example.com/team/app:2022", registry.FormatDockerSave, []string{registry.Build2022}},
		{lay, "example.com/team/app:multi", registry.FormatOCILayout, []string{registry.Build2019, registry.Build2022}},
		{archive, "example.com/team/app:archived", registry.FormatOCIArchive, []string{registry.Build2019, registry.Build2022}},
	} {
		imgs, cleanup, err := registry.ReadImages(c.path, "")
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if len(imgs) != 1 || imgs[0].Ref != c.ref || imgs[0].Format != c.format {
			t.Fatalf("%s: read %+v, want one %s named %s", c.path, imgs, c.format, c.ref)
		}
		digest, err := pusher.Push(ctx, imgs[0], nil)
		cleanup()
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		m, err := reg.Lookup(ctx, c.ref)
		if err != nil {
			t.Fatalf("%s: lookup: %v", c.ref, err)
		}
		var builds []string
		for _, p := range m.Platforms {
			if p.OS != "windows" || p.Architecture != "amd64" {
				t.Errorf("%s: platform %+v", c.ref, p)
			}
			builds = append(builds, p.OSVersion)
		}
		if m.Digest != digest || !slices.Equal(builds, c.platforms) {
			t.Errorf("%s: digest %s builds %v, want %s %v", c.ref, m.Digest, builds, digest, c.platforms)
		}
		pr := m.Process["windows"]
		if !slices.Equal(pr.Entrypoint, []string{`C:\app\app.exe`}) || !slices.Equal(pr.Cmd, []string{"--serve"}) || pr.WorkingDir != `C:\app` ||
			!slices.Equal(pr.Env, []string{"APP_MODE=test"}) || !slices.Contains(pr.Files, "/app/app.exe") || slices.ContainsFunc(pr.Files, func(f string) bool { return strings.Contains(f, "Hives") }) {
			t.Errorf("%s: process %+v", c.ref, pr)
		}
		if !slices.Equal(m.Listens, []string{"8080/tcp"}) {
			t.Errorf("%s: listens %v", c.ref, m.Listens)
		}
	}
	// The docker save image is the very image built: same manifest digest.
	want, _ := app2022.ConfigName()
	desc, err := remote.Get(mustRef(t, reg.Host()+"/example.com/team/app:2022"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	if cn, _ := got.ConfigName(); cn != want {
		t.Errorf("config %s, want the build's %s", cn, want)
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLoadRename: a docker save of an image by ID has no tag; --ref names it.
func TestLoadRename(t *testing.T) {
	ctx := context.Background()
	reg, pusher, _ := startWithPush(t)
	p := filepath.Join(t.TempDir(), "byid.tar")
	if err := tarball.Write(nil, windowsApp(t, registry.Build2022), mustCreate(t, p)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := registry.ReadImages(p, ""); err == nil || !strings.Contains(err.Error(), "has no tag") || !strings.Contains(err.Error(), "--ref") {
		t.Fatalf("an untagged image: %v, want it to ask for --ref", err)
	}
	imgs, cleanup, err := registry.ReadImages(p, "example.com/team/renamed:1")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pusher.Push(ctx, imgs[0], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Lookup(ctx, "example.com/team/renamed:1"); err != nil {
		t.Fatal(err)
	}
}

func mustCreate(t *testing.T, p string) io.Writer {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// TestLoadRefusesWhatIsNoImage: each bad file is refused with what is
// wrong with it.
func TestLoadRefusesWhatIsNoImage(t *testing.T) {
	dir := t.TempDir()
	notTar := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notTar, bytes.Repeat([]byte("not an image, just words\n"), 40), 0o600); err != nil {
		t.Fatal(err)
	}
	noManifest := filepath.Join(dir, "files.tar")
	other := filepath.Join(dir, "other")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "readme"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tarDir(t, other, noManifest)
	artifact := filepath.Join(dir, "artifact")
	lp, err := layout.Write(artifact, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	blob := []byte(`{"sbom":true}`)
	h, n, _ := v1.SHA256(bytes.NewReader(blob))
	if err := lp.WriteBlob(h, io.NopCloser(bytes.NewReader(blob))); err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendDescriptor(v1.Descriptor{MediaType: types.MediaType("application/spdx+json"), Digest: h, Size: n,
		Annotations: map[string]string{"io.containerd.image.name": "example.com/sbom:1"}}); err != nil {
		t.Fatal(err)
	}
	unnamed := filepath.Join(dir, "unnamed")
	ulp, err := layout.Write(unnamed, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := ulp.AppendImage(windowsApp(t, registry.Build2022), layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ path, want string }{
		{notTar, "is not a tar archive"},
		{noManifest, "holds no image manifest"},
		{other, "has no index.json"},
		{artifact, `unsupported media type "application/spdx+json"`},
		{unnamed, `named only "latest"`},
		{filepath.Join(dir, "missing.tar"), "no such file"},
	} {
		_, cleanup, err := registry.ReadImages(c.path, "")
		cleanup()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", filepath.Base(c.path), err, c.want)
		}
	}
}

// TestPushSocketIsTheOnlyWayIn: the push socket is the owner's only
// (mode 0600), and with it open the registry's port still refuses a
// foreign push over a loaded image, which stays as loaded.
func TestPushSocketIsTheOnlyWayIn(t *testing.T) {
	ctx := context.Background()
	reg, pusher, sock := startWithPush(t)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("push socket %s mode %v, want a socket with 0600", sock, fi.Mode())
	}
	p := filepath.Join(t.TempDir(), "app.tar")
	tag, _ := name.NewTag("example.com/team/app:1")
	if err := tarball.WriteToFile(p, tag, windowsApp(t, registry.Build2022)); err != nil {
		t.Fatal(err)
	}
	imgs, cleanup, err := registry.ReadImages(p, "")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := pusher.Push(ctx, imgs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	evil, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range []authn.Authenticator{authn.Anonymous, &authn.Basic{Username: "winkube", Password: "guess"}} {
		if err := remote.Write(mustRef(t, reg.Host()+"/example.com/team/app:1"), evil, remote.WithAuth(auth)); err == nil {
			t.Errorf("a push over the loaded image through the registry's port with %T was accepted", auth)
		}
	}
	m, err := reg.Lookup(ctx, "example.com/team/app:1")
	if err != nil || m.Digest != loaded {
		t.Fatalf("the loaded image is %+v (%v), want %s", m, err, loaded)
	}
}
