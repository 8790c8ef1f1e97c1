package release

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// CABundlePath is where Go's crypto/x509 looks for the system's roots on
// Linux, and where the image carries them: the manager trusts Azure's TLS
// certificates through it.
const CABundlePath = "/etc/ssl/certs/ca-certificates.crt"

// ImageOptions say what goes into the manager image.
type ImageOptions struct {
	// Binary is a static linux/amd64 winkube binary (CGO_ENABLED=0).
	Binary string
	// CACertificates is a PEM bundle of trusted roots, such as the build
	// machine's /etc/ssl/certs/ca-certificates.crt.
	CACertificates string
	// Architecture of the binary; amd64 when empty.
	Architecture string
}

// Image builds the manager image without a container runtime: one layer
// with the binary, the CA bundle and a passwd entry for the non-root user,
// run as 65532 with `winkube manager` as entrypoint.
func Image(o ImageOptions) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("release: the manager binary: %w", err)
	}
	if !isStaticELF(bin) {
		return nil, fmt.Errorf("release: %s is not a static Linux binary: build it with CGO_ENABLED=0 GOOS=linux", o.Binary)
	}
	ca, err := os.ReadFile(o.CACertificates)
	if err != nil {
		return nil, fmt.Errorf("release: CA certificates: %w", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("release: %s holds no PEM certificate", o.CACertificates)
	}
	uid := strconv.Itoa(NonRootUserID)
	files := []tarEntry{
		{name: "etc/", dir: true},
		{name: "etc/ssl/", dir: true},
		{name: "etc/ssl/certs/", dir: true},
		{name: CABundlePath[1:], data: ca, mode: 0o644},
		{name: "etc/passwd", data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + uid + ":" + uid + ":nonroot:/home/nonroot:/sbin/nologin\n"), mode: 0o644},
		{name: "etc/group", data: []byte("root:x:0:\nnonroot:x:" + uid + ":\n"), mode: 0o644},
		{name: "home/", dir: true},
		{name: "home/nonroot/", dir: true, uid: NonRootUserID},
		{name: BinaryPath[1:], data: bin, mode: 0o755},
	}
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: layer, MediaType: types.OCILayer,
		History: v1.History{CreatedBy: "winkube make image: the static manager binary, CA certificates, user " + uid},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	arch := o.Architecture
	if arch == "" {
		arch = "amd64"
	}
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.User = uid + ":" + uid
	cf.Config.WorkingDir = "/"
	cf.Config.Entrypoint = []string{BinaryPath, "manager"}
	cf.Config.Env = []string{"SSL_CERT_FILE=" + CABundlePath, "HOME=/home/nonroot"}
	cf.Config.ExposedPorts = map[string]struct{}{
		fmt.Sprintf("%d/tcp", WebhookPort): {}, fmt.Sprintf("%d/tcp", MetricsPort): {}, fmt.Sprintf("%d/tcp", HealthPort): {},
	}
	cf.Config.Labels = map[string]string{"org.opencontainers.image.title": "winkube-manager"}
	return mutate.ConfigFile(img, cf)
}

// WriteImageTarball writes the image as a tarball that `docker load` and
// `crane push` read, tagged ref. It returns the tarball's size in bytes.
func WriteImageTarball(path, ref string, img v1.Image) (int64, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return 0, fmt.Errorf("release: image %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// WriteImageLayout writes the image into an OCI image layout folder (which
// `crane push DIR REF`, skopeo and containerd read), under the
// org.opencontainers.image.ref.name annotation ref.
func WriteImageLayout(dir, ref string, img v1.Image) error {
	if _, err := name.NewTag(ref); err != nil {
		return fmt.Errorf("release: image %q: %w", ref, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref}))
}

type tarEntry struct {
	name string
	data []byte
	mode int64
	dir  bool
	uid  int
}

// tarOf writes a layer with fixed times, so that the same inputs make the
// same digest.
func tarOf(entries []tarEntry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, ModTime: epoch, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		} else {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, e.mode, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// isStaticELF says whether b is a Linux executable without a program
// interpreter: a dynamically linked binary would not start in an image that
// has no libc.
func isStaticELF(b []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return false
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return false
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}
