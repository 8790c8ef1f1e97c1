package registry

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The formats an image comes in from a build or another registry.
const (
	FormatDockerSave = "docker save tarball"
	FormatOCILayout  = "OCI image layout"
	FormatOCIArchive = "OCI archive"
)

// The annotations that name an image in an OCI layout's index.json:
// containerd's (and BuildKit's, `--output type=oci,name=...`) full
// reference, and the OCI image spec's ref.name, which tools often set to
// a tag only (annotations.md, opencontainers/image-spec).
const (
	containerdNameAnnotation = "io.containerd.image.name"
	ociRefNameAnnotation     = "org.opencontainers.image.ref.name"
)

// Loadable is one image read from a file, with the public reference it is
// to be published under. Exactly one of Image and Index is set: an index
// (manifest list) is kept whole, with every platform's manifest and
// config as built.
type Loadable struct {
	Ref    string
	Image  v1.Image
	Index  v1.ImageIndex
	Format string
}

// Platforms are the platforms the image runs on: the index's entries (an
// attestation's "unknown" left out), or the image's config.
func (l Loadable) Platforms() ([]v1.Platform, error) {
	if l.Image != nil {
		cfg, err := l.Image.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("%s: reading its config: %w", l.Ref, err)
		}
		return []v1.Platform{{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant, OSVersion: cfg.OSVersion}}, nil
	}
	im, err := l.Index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%s: reading its index: %w", l.Ref, err)
	}
	var out []v1.Platform
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS != "unknown" {
			out = append(out, *d.Platform)
		}
	}
	return out, nil
}

// ReadImages reads the images at path: a `docker save` tarball, an OCI
// image layout directory, or an OCI archive (a tar of a layout, as
// `docker buildx build --output type=oci` writes), plain or gzipped.
// rename, when set, is the reference to publish the one image under,
// for an archive whose image carries no full name. cleanup removes what
// reading an archive unpacked; call it once the images are pushed.
func ReadImages(p, rename string) (images []Loadable, cleanup func(), err error) {
	cleanup = func() {}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, cleanup, err
	}
	if fi.IsDir() {
		if _, err := os.Stat(filepath.Join(p, "index.json")); err != nil {
			return nil, cleanup, fmt.Errorf("%s is a directory but not an OCI image layout: it has no index.json (write one with `docker buildx build --output type=oci,tar=false,dest=DIR` or `skopeo copy ... oci:DIR`)", p)
		}
		images, err = readLayout(p, rename, FormatOCILayout)
		return images, cleanup, wrapPath(p, err)
	}
	names, err := tarEntries(p)
	if err != nil {
		return nil, cleanup, err
	}
	switch {
	case names["manifest.json"]:
		// docker save writes manifest.json; Docker 25 and later also
		// write index.json beside it, whose manifests may name
		// platforms the tarball holds no blobs of: the docker format
		// is the one that matches the content.
		images, err = readDockerSave(p, rename)
		return images, cleanup, wrapPath(p, err)
	case names["index.json"]:
		dir, err := os.MkdirTemp("", "winkube-image-")
		if err != nil {
			return nil, cleanup, err
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		if err := untar(p, dir); err != nil {
			return nil, cleanup, wrapPath(p, err)
		}
		images, err = readLayout(dir, rename, FormatOCIArchive)
		return images, cleanup, wrapPath(p, err)
	}
	return nil, cleanup, fmt.Errorf("%s holds no image manifest: a `docker save` tarball has manifest.json and an OCI archive has index.json at its top, this tar has neither", p)
}

func wrapPath(p string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", p, err)
}

// openTar opens a tar file, through gzip when it is compressed.
func openTar(p string) (io.ReadCloser, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(f)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{zr, f}, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{br, f}, nil
}

// tarEntries lists a tar's top-level file names, or says it is no tar.
func tarEntries(p string) (map[string]bool, error) {
	rc, err := openTar(p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s is not a tar archive (`docker save -o FILE` and `docker buildx build --output type=oci,dest=FILE` write one; an OCI layout is a directory): %w", p, err)
		}
		names[path.Clean(strings.TrimPrefix(h.Name, "./"))] = true
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s is an empty tar archive: it holds no image", p)
	}
	return names, nil
}

// What unpacking an archive may write into TMPDIR: a tar holds its
// files' bytes, so a plain one unpacks to at most its own size; a gzipped
// one to unpackRatio times its size plus unpackSlack. An OCI archive holds
// layers that are compressed already, which gzip cannot shrink again (an
// archive of uncompressed layers shrinks a few times at most), while a
// gzip bomb expands about a thousand times (deflate's limit, RFC 1951's
// longest match of 258 bytes from a few bits): such a file is refused
// before it fills the disk.
var (
	unpackRatio int64 = 20
	unpackSlack int64 = 256 << 20
)

// unpackLimit is how many bytes unpacking the archive at p may write.
func unpackLimit(p string) (limit int64, gzipped bool, err error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, false, err
	}
	magic := make([]byte, 2)
	if n, _ := io.ReadFull(f, magic); n == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		return fi.Size()*unpackRatio + unpackSlack, true, nil
	}
	return fi.Size(), false, nil
}

// untar unpacks an OCI archive's regular files into dir; any other entry
// (a link, a device) is refused, and no entry may leave dir. It refuses an
// archive whose files add up to more than unpackLimit allows.
func untar(p, dir string) error {
	limit, gzipped, err := unpackLimit(p)
	if err != nil {
		return err
	}
	tooBig := func(total int64) error {
		what := "its files add up to more than the tar's own size, which a tar cannot hold"
		if gzipped {
			what = fmt.Sprintf("it expands to more than %d times its compressed size (a gzip bomb, or an archive of uncompressed layers): unpack it yourself (`gunzip -c %s > FILE.tar`) where there is room and load FILE.tar",
				unpackRatio, filepath.Base(p))
		}
		return fmt.Errorf("unpacking it into %s would write more than %d bytes (at least %d): %s", filepath.Dir(dir), limit, total, what)
	}
	rc, err := openTar(p)
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var written int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if rel == "." {
			continue
		}
		if !filepath.IsLocal(filepath.FromSlash(rel)) {
			return fmt.Errorf("entry %q points outside the archive", h.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return err
			}
			// The header's size is what the entry claims; the copy
			// is bounded by what is left, whatever the stream holds.
			if written+h.Size > limit {
				return tooBig(written + h.Size)
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			n, err := io.Copy(f, io.LimitReader(tr, limit-written+1))
			written += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if written > limit {
				return tooBig(written)
			}
		default:
			return fmt.Errorf("entry %q is not a regular file or directory: an OCI archive holds only blobs, index.json and oci-layout", h.Name)
		}
	}
}

func readDockerSave(p, rename string) ([]Loadable, error) {
	opener := func() (io.ReadCloser, error) { return openTar(p) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("reading manifest.json: %w", err)
	}
	if len(m) == 0 {
		return nil, errors.New("manifest.json lists no image")
	}
	if rename != "" {
		if len(m) != 1 {
			return nil, fmt.Errorf("the tarball holds %d images: a name can be given only to one", len(m))
		}
		img, err := tarball.Image(opener, nil)
		if err != nil {
			return nil, err
		}
		return []Loadable{{Ref: rename, Image: img, Format: FormatDockerSave}}, nil
	}
	var out []Loadable
	for _, d := range m {
		if len(d.RepoTags) == 0 {
			return nil, fmt.Errorf("an image in the tarball (config %s) has no tag (it was saved by ID): save it by name (`docker save NAME:TAG`) or give it one with --ref", d.Config)
		}
		for _, t := range d.RepoTags {
			tag, err := name.NewTag(t)
			if err != nil {
				return nil, fmt.Errorf("image tag %q: %w", t, err)
			}
			img, err := tarball.Image(opener, &tag)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", t, err)
			}
			out = append(out, Loadable{Ref: t, Image: img, Format: FormatDockerSave})
		}
	}
	return out, nil
}

func readLayout(dir, rename, format string) ([]Loadable, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading index.json: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading index.json: %w", err)
	}
	if len(im.Manifests) == 0 {
		return nil, errors.New("index.json lists no image manifest")
	}
	if rename != "" && len(im.Manifests) != 1 {
		return nil, fmt.Errorf("index.json lists %d images: a name can be given only to one", len(im.Manifests))
	}
	var out []Loadable
	for _, d := range im.Manifests {
		ref := rename
		if ref == "" {
			if ref, err = layoutName(d); err != nil {
				return nil, err
			}
		}
		l := Loadable{Ref: ref, Format: format}
		switch {
		case d.MediaType.IsIndex():
			if l.Index, err = idx.ImageIndex(d.Digest); err != nil {
				return nil, fmt.Errorf("image %s: %w", ref, err)
			}
		case d.MediaType.IsImage():
			if l.Image, err = idx.Image(d.Digest); err != nil {
				return nil, fmt.Errorf("image %s: %w", ref, err)
			}
		default:
			return nil, fmt.Errorf("index.json entry %s has the unsupported media type %q: only image manifests (%s, %s) and indexes (%s, %s) can be loaded",
				d.Digest, d.MediaType, types.OCIManifestSchema1, types.DockerManifestSchema2, types.OCIImageIndex, types.DockerManifestList)
		}
		out = append(out, l)
	}
	return out, nil
}

// layoutName is the full reference an index.json entry names.
func layoutName(d v1.Descriptor) (string, error) {
	if n := d.Annotations[containerdNameAnnotation]; n != "" {
		return n, nil
	}
	n := d.Annotations[ociRefNameAnnotation]
	if n != "" && strings.ContainsAny(n, "/:@") {
		if _, err := name.ParseReference(n); err == nil {
			return n, nil
		}
	}
	if n != "" {
		return "", fmt.Errorf("the image %s is named only %q in index.json (%s is often a tag alone): give its full reference with --ref", d.Digest, n, ociRefNameAnnotation)
	}
	return "", fmt.Errorf("the image %s has no name in index.json (no %s or %s annotation): give it one with --ref", d.Digest, containerdNameAnnotation, ociRefNameAnnotation)
}

// PushSocket is the file name, in a local world's state directory, of its
// registry's push socket (ServePush).
const PushSocket = "registry-push.sock"

// ServePush serves writes to the registry on a Unix socket at p, which
// only the world's owner may open. The registry's TCP port, which every
// user of the machine and every pod reaches, keeps refusing writes
// without the credential the world's process holds in memory: the socket
// is how another winkube process of the same user (`winkube image load`)
// publishes an image, with the file system's permissions as its
// credential.
//
// The socket is bound inside a directory made for it with mode 0700
// (os.MkdirTemp), made 0600 there and only then renamed to p: a socket
// bound at p directly exists with the process umask's mode (0755 under the
// usual 022, and connect(2) on Linux needs only write permission on the
// socket file, unix(7)) until a chmod after bind, an instant in which
// another user could connect and push. A rename does not change the
// inode's mode, and it is atomic within one directory's file system.
func (r *Registry) ServePush(p string) error {
	_ = os.Remove(p) // a socket a killed world left behind
	dir, err := os.MkdirTemp(filepath.Dir(p), PushSocketTempPrefix)
	if err != nil {
		return fmt.Errorf("image registry push socket: %w", err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, PushSocket)
	ln, err := listenUnix(tmp)
	if err != nil {
		return fmt.Errorf("image registry push socket: %w", err)
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		// The path it was bound at is gone after the rename; Close
		// removes p instead.
		ul.SetUnlinkOnClose(false)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		_ = ln.Close()
		return fmt.Errorf("image registry push socket: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = ln.Close()
		return fmt.Errorf("image registry push socket: %w", err)
	}
	r.pushPath = p
	r.pushSrv = &http.Server{Handler: r.handler, ReadHeaderTimeout: r.srv.ReadHeaderTimeout}
	go func() { _ = r.pushSrv.Serve(ln) }()
	return nil
}

// PushSocketTempPrefix names the private directory ServePush binds the push
// socket in, beside it, for the instant before it is renamed into place
// (a kill in that instant leaves it behind).
const PushSocketTempPrefix = ".registry-push-"

// listenUnix binds a Unix socket; a variable so that a test can see where
// the bind happens.
var listenUnix = func(p string) (net.Listener, error) { return net.Listen("unix", p) }

// Pusher publishes images into a running world's registry from another
// process, through its push socket.
type Pusher struct {
	host string
	tr   http.RoundTripper
}

// NewPusher writes to the registry serving host (its host:port) through
// the push socket at sock.
func NewPusher(host, sock string) *Pusher {
	return &Pusher{host: host, tr: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// Push publishes l under its public reference and returns the digest it
// has there. progress, when set, hears how far the upload is.
func (p *Pusher) Push(ctx context.Context, l Loadable, progress func(string)) (string, error) {
	ref, err := localRef(p.host, l.Ref)
	if err != nil {
		return "", err
	}
	updates := make(chan v1.Update, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reported := int64(-1)
		for u := range updates {
			if progress == nil || u.Total <= 0 {
				continue
			}
			// A line per tenth of the upload.
			if step := u.Complete * 10 / u.Total; step > reported {
				reported = step
				progress(fmt.Sprintf("pushing %s: %d%% (%s of %s)", l.Ref, step*10, mb(u.Complete), mb(u.Total)))
			}
		}
	}()
	// A Windows base layer saved before 2023 is "foreign" (its manifest
	// points at mcr.microsoft.com for it); the world cannot reach there,
	// so its content is pushed too.
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(p.tr), remote.WithProgress(updates), remote.WithNondistributable}
	var digest v1.Hash
	if l.Index != nil {
		err = remote.WriteIndex(ref, l.Index, opts...)
		if err == nil {
			digest, err = l.Index.Digest()
		}
	} else {
		err = remote.Write(ref, l.Image, opts...)
		if err == nil {
			digest, err = l.Image.Digest()
		}
	}
	wg.Wait()
	if err != nil {
		return "", fmt.Errorf("push %s: %w", l.Ref, err)
	}
	return digest.String(), nil
}

func mb(n int64) string {
	if n < 1e6 {
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}

// maxLayerFiles bounds what layerFiles keeps of one image.
const maxLayerFiles = 200000

// layerFiles lists the files (and links) of an image's merged layers as
// absolute paths with forward slashes, applying the layers' whiteouts
// (OCI image-spec layer.md, "Whiteouts"). A Windows layer keeps the
// container's files under Files/ (its registry hives under Hives/): only
// those are the image's file system (hcsshim's wclayer format).
func layerFiles(img v1.Image, goos string) ([]string, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	files := map[string]bool{}
	for _, l := range layers {
		if mt, err := l.MediaType(); err == nil && !mt.IsDistributable() {
			// A foreign Windows base layer: the OS's own files, which
			// the host's view already has.
			continue
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				_ = rc.Close()
				return nil, err
			}
			p := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
			if goos == "windows" {
				rest, ok := strings.CutPrefix(p, "Files/")
				if !ok {
					continue
				}
				p = rest
			}
			dir, base := path.Split(p)
			switch {
			case base == ".wh..wh..opq":
				for f := range files {
					if strings.HasPrefix(f, "/"+dir) {
						delete(files, f)
					}
				}
			case strings.HasPrefix(base, ".wh."):
				gone := "/" + dir + strings.TrimPrefix(base, ".wh.")
				for f := range files {
					if f == gone || strings.HasPrefix(f, gone+"/") {
						delete(files, f)
					}
				}
			case h.Typeflag != tar.TypeDir && len(files) < maxLayerFiles:
				files["/"+p] = true
			}
		}
		_ = rc.Close()
	}
	out := make([]string, 0, len(files))
	for f := range files {
		out = append(out, f)
	}
	sort.Strings(out)
	return out, nil
}
