package release_test

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/winkube/winkube/internal/release"
	"github.com/winkube/winkube/internal/testenv"
)

// TestManagerImage builds the image from the real static binary, reads the
// tarball back as `crane push` and `docker load` would, and runs the binary
// taken out of its layer. It is of the full tier (make test): the static
// binary is a build of its own (CGO_ENABLED=0, a configuration the test
// binaries do not share, and a link of the whole winkube), 78 s of `go test
// -short` on a loaded 2-core machine, and no static binary is at hand to
// package instead (the test binary and bin/'s tools are dynamically linked).
func TestManagerImage(t *testing.T) {
	testenv.SkipIfShort(t, "builds and links a static winkube for the image")
	dir := t.TempDir()
	bin := winkubeBinary(t)
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := release.Image(release.ImageOptions{Binary: bin, CACertificates: ca})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	size, err := release.WriteImageTarball(path, testImage, img)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(testImage)
	loaded, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("the tarball does not read back as %s: %v", testImage, err)
	}
	t.Logf("image tarball: %d bytes", size)
	// The OCI layout keeps the image's own (OCI) manifest and digest.
	lp := filepath.Join(dir, "oci")
	if err := release.WriteImageLayout(lp, testImage, img); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(lp)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("OCI layout index: %v %v", im, err)
	}
	want, _ := img.Digest()
	if d := im.Manifests[0]; d.Digest != want || d.MediaType != types.OCIManifestSchema1 || d.Annotations["org.opencontainers.image.ref.name"] != testImage {
		t.Errorf("OCI layout holds %+v, want %s", d, want)
	}
	cf, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/winkube manager" || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("image config: user %q entrypoint %v platform %s/%s", cf.Config.User, cf.Config.Entrypoint, cf.OS, cf.Architecture)
	}
	layers, err := loaded.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]*tar.Header{}
	extracted := filepath.Join(dir, "extracted-winkube")
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = h
		if h.Name == "winkube" {
			f, err := os.OpenFile(extracted, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	if h := seen["winkube"]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("the binary is missing or not executable: %+v", h)
	}
	if seen["etc/ssl/certs/ca-certificates.crt"] == nil || seen["etc/passwd"] == nil {
		t.Errorf("the layer lacks the CA bundle or passwd: %v", seen)
	}
	out, err := exec.Command(extracted, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "winkube") {
		t.Fatalf("the image's binary does not run: %v\n%s", err, out)
	}

	// A binary that needs a dynamic loader would not start in this image.
	dynamic, err := exec.LookPath("ls")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Image(release.ImageOptions{Binary: dynamic, CACertificates: ca}); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("a dynamically linked binary was packaged: %v", err)
	}
}
