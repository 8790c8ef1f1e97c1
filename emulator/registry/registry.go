// Package registry serves an OCI distribution registry in-process on
// loopback. It stands in for every public registry a cluster pulls from
// (registry.k8s.io, mcr.microsoft.com, docker.io, ...): the image
// mcr.microsoft.com/windows/servercore:ltsc2022 lives here as repository
// "mcr.microsoft.com/windows/servercore", so references in manifests need
// no rewriting. Images are small but carry real platform metadata (OS,
// architecture, Windows build), which is what the machine runtime checks
// the way containerd does.
package registry

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ProvidesLabel is the image label saying what an image installs on the
// node when it runs: "cni" (it writes a CNI configuration, which makes the
// node's network ready) or "kube-proxy". Real images do this with their
// content; these small ones say it with a label.
const ProvidesLabel = "dev.winkube.emulator.provides"

// ListenFlagsLabel lists the flags that move where an image's process
// listens (Image.ListenFlags).
const ListenFlagsLabel = "dev.winkube.emulator.listen-flags"

// FilesLabel lists, one a line, the files of the image its process uses:
// the small images published here have no layers to hold them.
const FilesLabel = "dev.winkube.emulator.files"

// Process is what an image's config says of the process it runs
// (ENTRYPOINT, CMD, WORKDIR, ENV, as its Dockerfile sets them) and the
// files it holds that the process uses, for one OS. Source cites the
// Dockerfile.
type Process struct {
	Entrypoint []string
	Cmd        []string
	WorkingDir string
	Env        []string
	// User is the image's USER (config User): the account a Windows
	// container runs as when the pod names none.
	User   string
	Files  []string
	Source string
}

// Registry is a running in-process registry.
type Registry struct {
	srv  *http.Server
	host string
	// handler holds the images; srv serves it on TCP, pushSrv (when
	// ServePush started it) on the push socket.
	handler http.Handler
	pushSrv *http.Server
	// pushPath is where pushSrv's socket is, removed on Close.
	pushPath string
	// pusher is the one credential that may write: the registry's own
	// (Push), held only in this process.
	pusher authn.Basic
	// puller makes every pull of the world's container runtimes; see
	// newPuller.
	puller *remote.Puller
}

// newPuller is the one client the simulated container runtimes pull
// with. A remote.Get without one builds a transport per call, and each
// new transport pings the registry's /v2/ first (over https and http at
// once for a registry without TLS, so each pull cost a TLS ClientHello
// and two new connections). A containerd keeps its registry state per
// host instead: its docker authorizer holds one handler per host, adds
// credentials only after a 401 challenge, and caches each bearer token
// per scope (containerd core/remotes/docker/authorizer.go @02e0fef8,
// dockerAuthorizer.handlers and authHandler.scopedTokens). This
// registry's reads are anonymous and never challenged, so there is no
// token to keep: the puller keeps the ping's outcome per repository and
// its connections, with room for the many runtimes pulling at once
// (go-containerregistry's default transport keeps 50 idle per host).
func newPuller() (*remote.Puller, error) {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = pullIdleConns, pullIdleConns
	return remote.NewPuller(remote.WithTransport(t))
}

// pullIdleConns is how many connections the pulls keep open: a world's
// nodes pull at once as they join, hundreds of them at 500 nodes.
const pullIdleConns = 256

// listenTCP binds the registry's port (a test counts its connections).
var listenTCP = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// pusherName is the user name of the registry's own push credential.
const pusherName = "winkube"

// Start serves a registry on addr ("127.0.0.1:0" picks a port).
//
// Pulls are anonymous, as from the public registries it stands in for:
// the nodes' container runtimes pull without credentials (no pod sets
// imagePullSecrets for registry.k8s.io or mcr.microsoft.com), and what the
// images hold is public. Writes need the registry's own credential, made
// here and kept in memory: on a machine other users share, any of them
// reaches a loopback port, and an image pushed over one of the world's
// would run on its nodes.
func Start(addr string) (*Registry, error) {
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("image registry: %w", err)
	}
	ln, err := listenTCP(addr)
	if err != nil {
		return nil, fmt.Errorf("image registry: %w", err)
	}
	puller, err := newPuller()
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("image registry: %w", err)
	}
	r := &Registry{host: ln.Addr().String(), pusher: authn.Basic{Username: pusherName, Password: hex.EncodeToString(secret)}, puller: puller}
	r.handler = ggcrregistry.New(ggcrregistry.Logger(discard()))
	r.srv = &http.Server{Handler: r.authorize(r.handler), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// authorize lets reads through and refuses a write without the pusher's
// credential as the OCI distribution specification has a registry refuse
// an unauthenticated request (spec.md, "Error Codes": 401 with a
// WWW-Authenticate challenge and the UNAUTHORIZED code), with the Basic
// challenge of RFC 7617 that clients such as containerd and
// go-containerregistry answer.
func (r *Registry) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			next.ServeHTTP(w, req)
			return
		}
		user, pass, ok := req.BasicAuth()
		if ok && subtle.ConstantTimeCompare([]byte(user), []byte(r.pusher.Username)) == 1 &&
			subtle.ConstantTimeCompare([]byte(pass), []byte(r.pusher.Password)) == 1 {
			next.ServeHTTP(w, req)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="winkube local world registry"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":"only the local world pushes to its registry"}]}` + "\n"))
	})
}

// Host is the registry's host:port.
func (r *Registry) Host() string { return r.host }

// Close stops serving.
func (r *Registry) Close() error {
	if r.pushSrv != nil {
		_ = r.pushSrv.Close()
		_ = os.Remove(r.pushPath)
	}
	return r.srv.Close()
}

// local maps a public image reference to where it lives in this registry.
func (r *Registry) local(ref string) (name.Reference, error) { return localRef(r.host, ref) }

// localRef maps a public image reference to where it lives in the registry
// serving host.
func localRef(host, ref string) (name.Reference, error) {
	pub, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	repo := pub.Context().RegistryStr() + "/" + pub.Context().RepositoryStr()
	if pub.Context().RegistryStr() == name.DefaultRegistry {
		repo = "docker.io/" + pub.Context().RepositoryStr()
	}
	return name.ParseReference(host+"/"+repo+sep(pub)+pub.Identifier(), name.Insecure)
}

func sep(ref name.Reference) string {
	if _, ok := ref.(name.Digest); ok {
		return "@"
	}
	return ":"
}

// Image is an image to publish: one manifest per platform, an index when
// there are several.
type Image struct {
	Ref       string
	Platforms []v1.Platform
	// Provides is what running the image installs on a node ("cni",
	// "kube-proxy"), or empty.
	Provides string
	// Listens are the TCP ports the image's process serves ("8080/tcp"),
	// its health endpoints included, kept in the image config's
	// ExposedPorts. Real images often EXPOSE fewer; the simulated kubelet
	// answers probes on these and refuses the others.
	Listens []string
	// ListenFlags are the process's flags that move its health or
	// metrics endpoint ("--http-endpoint", "--health-port"): a container
	// setting one listens there instead of on Listens. Kept in the
	// image config as the ListenFlagsLabel.
	ListenFlags []string
	// Process is the image's process by OS ("linux", "windows"), for
	// the images whose start the machine runtime models.
	Process map[string]Process
}

// Push publishes an image.
func (r *Registry) Push(ctx context.Context, img Image) error {
	ref, err := r.local(img.Ref)
	if err != nil {
		return err
	}
	if len(img.Platforms) == 0 {
		return fmt.Errorf("image %s has no platform", img.Ref)
	}
	build := func(p v1.Platform) (v1.Image, error) {
		cfg := &v1.ConfigFile{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant, OSVersion: p.OSVersion, RootFS: v1.RootFS{Type: "layers"}}
		if img.Provides != "" || len(img.ListenFlags) > 0 {
			cfg.Config.Labels = map[string]string{}
		}
		if img.Provides != "" {
			cfg.Config.Labels[ProvidesLabel] = img.Provides
		}
		if len(img.ListenFlags) > 0 {
			cfg.Config.Labels[ListenFlagsLabel] = strings.Join(img.ListenFlags, ",")
		}
		if pr, ok := img.Process[p.OS]; ok {
			cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.WorkingDir, cfg.Config.Env, cfg.Config.User = pr.Entrypoint, pr.Cmd, pr.WorkingDir, pr.Env, pr.User
			if len(pr.Files) > 0 {
				if cfg.Config.Labels == nil {
					cfg.Config.Labels = map[string]string{}
				}
				cfg.Config.Labels[FilesLabel] = strings.Join(pr.Files, "\n")
			}
		}
		for _, port := range img.Listens {
			if cfg.Config.ExposedPorts == nil {
				cfg.Config.ExposedPorts = map[string]struct{}{}
			}
			cfg.Config.ExposedPorts[port] = struct{}{}
		}
		return mutate.ConfigFile(empty.Image, cfg)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(&r.pusher)}
	if len(img.Platforms) == 1 {
		one, err := build(img.Platforms[0])
		if err != nil {
			return err
		}
		return remote.Write(ref, one, opts...)
	}
	idx := v1.ImageIndex(empty.Index)
	for _, p := range img.Platforms {
		one, err := build(p)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: one, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return remote.WriteIndex(ref, idx, opts...)
}

// Manifest is what a pull learns of an image before choosing a platform.
type Manifest struct {
	// Digest is the image's (or its index's) digest, for the imageID.
	Digest    string
	Platforms []v1.Platform
	Provides  string
	// Listens are the ports the image's process serves ("8080/tcp").
	Listens []string
	// ListenFlags are the flags that move them (Image.ListenFlags).
	ListenFlags []string
	// Process is the image's process by OS, from its config.
	Process map[string]Process
}

// ErrNotFound reports an image the registry does not have.
var ErrNotFound = errors.New("not found")

// HasRepository says whether the registry holds any tag of ref's
// repository: a registry answers a missing repository and a missing tag
// of an existing one differently (Docker Hub refuses the token for a
// repository that does not exist), and a pull's error says which.
func (r *Registry) HasRepository(ctx context.Context, ref string) (bool, error) {
	l, err := r.local(ref)
	if err != nil {
		return false, err
	}
	tags, err := remote.List(l.Context(), remote.WithContext(ctx), remote.Reuse(r.puller))
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return false, nil
		}
		return false, err
	}
	return len(tags) > 0, nil
}

// Lookup resolves a public reference the way a pull's first requests do.
func (r *Registry) Lookup(ctx context.Context, ref string) (*Manifest, error) {
	l, err := r.local(ref)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(l, remote.WithContext(ctx), remote.Reuse(r.puller))
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return nil, ErrNotFound
		}
		return nil, err
	}
	if cached, ok := manifests.Load(desc.Digest.String()); ok {
		return cached.(*Manifest), nil
	}
	m := &Manifest{Digest: desc.Digest.String()}
	var first v1.Image
	var all []v1.Image
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range im.Manifests {
			// BuildKit's attestation manifests say "unknown/unknown":
			// no runtime picks them (docs.docker.com "Attestation
			// storage").
			if d.Platform != nil && d.Platform.OS == "unknown" {
				continue
			}
			if d.Platform != nil {
				m.Platforms = append(m.Platforms, *d.Platform)
			}
			one, err := idx.Image(d.Digest)
			if err != nil {
				return nil, err
			}
			all = append(all, one)
		}
		if len(all) > 0 {
			first = all[0]
		}
	} else {
		if first, err = desc.Image(); err != nil {
			return nil, err
		}
		all = append(all, first)
	}
	for _, img := range all {
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		if _, seen := m.Process[cfg.OS]; seen || (len(cfg.Config.Entrypoint) == 0 && len(cfg.Config.Cmd) == 0 && cfg.Config.User == "") {
			continue
		}
		if m.Process == nil {
			m.Process = map[string]Process{}
		}
		pr := Process{Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, WorkingDir: cfg.Config.WorkingDir, Env: cfg.Config.Env, User: cfg.Config.User}
		if f := cfg.Config.Labels[FilesLabel]; f != "" {
			pr.Files = strings.Split(f, "\n")
		} else if len(cfg.RootFS.DiffIDs) > 0 {
			// An image loaded from a build has its files in its
			// layers: the process finds its program there.
			if pr.Files, err = layerFiles(img, cfg.OS); err != nil {
				return nil, fmt.Errorf("reading the files of %s: %w", ref, err)
			}
		}
		m.Process[cfg.OS] = pr
	}
	if first != nil {
		cfg, err := first.ConfigFile()
		if err != nil {
			return nil, err
		}
		if !desc.MediaType.IsIndex() {
			m.Platforms = []v1.Platform{{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant, OSVersion: cfg.OSVersion}}
		}
		m.Provides = cfg.Config.Labels[ProvidesLabel]
		if f := cfg.Config.Labels[ListenFlagsLabel]; f != "" {
			m.ListenFlags = strings.Split(f, ",")
		}
		for port := range cfg.Config.ExposedPorts {
			m.Listens = append(m.Listens, port)
		}
		sort.Strings(m.Listens)
	}
	// A manifest's digest names its content: what it says never
	// changes, so the configurations behind it are read once.
	if manifestsSize.Add(1) > maxCanonical {
		manifests.Clear()
		manifestsSize.Store(0)
	}
	manifests.Store(m.Digest, m)
	return m, nil
}

// Canonical is the fully qualified form of a reference ("nginx" ->
// "docker.io/library/nginx:latest"), as the kubelet reports images.
func Canonical(ref string) string {
	if c, ok := canonical.Load(ref); ok {
		return c.(string)
	}
	c := parseCanonical(ref)
	// A world uses a few dozen images, each asked for on every pod sync
	// of every node; parsing one costs microseconds and allocations. The
	// bound keeps a stream of distinct references from growing it.
	if canonicalSize.Add(1) > maxCanonical {
		canonical.Clear()
		canonicalSize.Store(0)
	}
	canonical.Store(ref, c)
	return c
}

var (
	canonical     sync.Map
	canonicalSize atomic.Int64
	// manifests are what Lookup learned, by manifest digest; callers
	// only read them.
	manifests     sync.Map
	manifestsSize atomic.Int64
)

const maxCanonical = 4096

func parseCanonical(ref string) string {
	r, err := name.ParseReference(ref)
	if err != nil {
		return ref
	}
	reg := r.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + r.Context().RepositoryStr() + sep(r) + r.Identifier()
}

// Repository is Canonical without the tag or digest.
func Repository(ref string) string {
	c := Canonical(ref)
	if i := strings.LastIndex(c, "@"); i > 0 {
		return c[:i]
	}
	if i := strings.LastIndex(c, ":"); i > strings.LastIndex(c, "/") {
		return c[:i]
	}
	return c
}
