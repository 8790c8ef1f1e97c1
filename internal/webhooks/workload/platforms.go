// Package workload is winkube's admission for workload clusters: it places
// pods on the operating system and Windows build their images can run on
// (reading the images' platforms from their registries), and refuses, with
// the field to change, Windows pods that ask for what Windows cannot do.
package workload

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Platform is one platform an image runs on.
type Platform struct {
	OS           string
	OSVersion    string
	Architecture string
}

// WindowsBuild is the build part of a Windows os.version ("10.0.20348.2700"
// -> "10.0.20348"), the part a host must match.
func (p Platform) WindowsBuild() string {
	parts := strings.Split(p.OSVersion, ".")
	if len(parts) < 3 {
		return p.OSVersion
	}
	return strings.Join(parts[:3], ".")
}

// Resolver reads image platforms from registries, caching them by digest
// (a digest's content never changes) and tags for a short while.
type Resolver struct {
	// Timeout bounds one image's resolution.
	Timeout time.Duration
	// TagTTL is how long a tag's digest is trusted.
	TagTTL time.Duration
	// Insecure lists registries reached over plain HTTP (a local registry).
	Insecure []string
	// Options are passed to every registry call (auth, transport).
	Options []remote.Option
	// Mirror, when set, is a registry (host:port, plain HTTP) holding every
	// image under <mirror>/<registry>/<repository>, as a containerd mirror
	// does: the local world's registry, where nodes pull from.
	Mirror string

	mu      sync.Mutex
	digests map[string][]Platform
	tags    map[string]tagEntry
	now     func() time.Time
}

type tagEntry struct {
	digest string
	at     time.Time
}

// NewResolver returns a Resolver with a 5-second timeout and a 1-minute tag TTL.
func NewResolver() *Resolver {
	return &Resolver{Timeout: 5 * time.Second, TagTTL: time.Minute, digests: map[string][]Platform{}, tags: map[string]tagEntry{}, now: time.Now}
}

func (r *Resolver) parse(image string) (name.Reference, error) {
	if r.Mirror != "" {
		pub, err := name.ParseReference(image)
		if err != nil {
			return nil, err
		}
		sep := ":"
		if _, ok := pub.(name.Digest); ok {
			sep = "@"
		}
		registry := pub.Context().RegistryStr()
		if registry == name.DefaultRegistry {
			registry = "docker.io"
		}
		return name.ParseReference(r.Mirror+"/"+registry+"/"+pub.Context().RepositoryStr()+sep+pub.Identifier(), name.Insecure)
	}
	var opts []name.Option
	for _, reg := range r.Insecure {
		if strings.HasPrefix(image, reg+"/") {
			opts = append(opts, name.Insecure)
		}
	}
	return name.ParseReference(image, opts...)
}

// Platforms returns the platforms of an image: every manifest of an index
// (manifest list), or the single manifest's config.
func (r *Resolver) Platforms(ctx context.Context, image string) ([]Platform, error) {
	ref, err := r.parse(image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	key := ref.Name()
	r.mu.Lock()
	if d, ok := ref.(name.Digest); ok {
		key = d.DigestStr()
	} else if e, ok := r.tags[key]; ok && r.now().Sub(e.at) < r.TagTTL {
		key = e.digest
	}
	if p, ok := r.digests[key]; ok {
		r.mu.Unlock()
		return p, nil
	}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	desc, err := remote.Get(ref, append([]remote.Option{remote.WithContext(ctx)}, r.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("reading image %s: %w", image, err)
	}
	var plats []Platform
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, md := range m.Manifests {
			if md.Platform != nil && md.Platform.OS != "unknown" {
				plats = append(plats, Platform{OS: md.Platform.OS, OSVersion: md.Platform.OSVersion, Architecture: md.Platform.Architecture})
			}
		}
	} else {
		img, err := desc.Image()
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		plats = []Platform{{OS: cf.OS, OSVersion: cf.OSVersion, Architecture: cf.Architecture}}
	}
	digest := desc.Digest.String()
	r.mu.Lock()
	r.digests[digest] = plats
	if _, ok := ref.(name.Tag); ok {
		r.tags[ref.Name()] = tagEntry{digest: digest, at: r.now()}
	}
	r.mu.Unlock()
	return plats, nil
}

// Tags lists the tags of an image's repository, read from its registry (or
// the mirror) as a pull would reach it.
func (r *Resolver) Tags(ctx context.Context, image string) ([]string, error) {
	ref, err := r.parse(image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	tags, err := remote.List(ref.Context(), append([]remote.Option{remote.WithContext(ctx)}, r.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("listing the tags of %s: %w", image, err)
	}
	return tags, nil
}

// RunsOn reports whether an image of platforms runs on a Windows host of
// build hostBuild: one of its Windows platforms is of a build such a host
// runs, or names no build (HostProcess images run on any Windows host).
func RunsOn(platforms []Platform, hostBuild string) bool {
	for _, p := range platforms {
		if p.OS != "windows" {
			continue
		}
		if p.OSVersion == "" || contains(hostsFor(p.WindowsBuild()), hostBuild) {
			return true
		}
	}
	return false
}

// WindowsBuilds are the distinct Windows builds of platforms, in order;
// "any" stands for a Windows platform that names no build.
func WindowsBuilds(platforms []Platform) []string {
	var out []string
	for _, p := range platforms {
		if p.OS != "windows" {
			continue
		}
		b := p.WindowsBuild()
		if b == "" {
			b = "any"
		}
		if !contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}
