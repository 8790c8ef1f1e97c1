package localworld

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/winkube/winkube/emulator/registry"
)

// LoadedImage is an image published into a running world's registry.
type LoadedImage struct {
	Ref       string
	Digest    string
	Format    string
	Platforms []v1.Platform
}

// String is the image as 'winkube image load' reports it.
func (l LoadedImage) String() string {
	plats := make([]string, 0, len(l.Platforms))
	for _, p := range l.Platforms {
		s := p.OS + "/" + p.Architecture
		if p.Variant != "" {
			s += "/" + p.Variant
		}
		if p.OSVersion != "" {
			s += " " + p.OSVersion
		}
		plats = append(plats, s)
	}
	return fmt.Sprintf("%s@%s (%s; %s)", l.Ref, l.Digest, l.Format, strings.Join(plats, ", "))
}

// LoadImages publishes the images in each path (a `docker save` tarball,
// an OCI layout directory or an OCI archive) into the registry of the
// world running on stateDir, under the references they carry (rename, when
// set, for a path holding one image). The world's nodes pull them, and its
// admission reads their platforms, as they do any image of the catalog.
func LoadImages(ctx context.Context, stateDir string, paths []string, rename string, progress func(string)) ([]LoadedImage, error) {
	if progress == nil {
		progress = func(string) {}
	}
	host, err := os.ReadFile(filepath.Join(stateDir, RegistryFile))
	if err != nil {
		return nil, fmt.Errorf("the local world in %s has no image registry (%w): is it running? start it with 'winkube up'", stateDir, err)
	}
	// The socket is only as private as the directory it is in.
	if err := checkPrivate(stateDir); err != nil {
		return nil, err
	}
	sock := filepath.Join(stateDir, registry.PushSocket)
	if _, err := os.Stat(sock); err != nil {
		return nil, fmt.Errorf("the local world in %s has no registry push socket (%w): is it running, and started by a winkube that loads images? start it again with 'winkube up'", stateDir, err)
	}
	pusher := registry.NewPusher(strings.TrimSpace(string(host)), sock)
	var out []LoadedImage
	for _, p := range paths {
		progress("reading " + p)
		imgs, cleanup, err := registry.ReadImages(p, rename)
		if err != nil {
			cleanup()
			return out, err
		}
		for _, img := range imgs {
			plats, err := img.Platforms()
			if err != nil {
				cleanup()
				return out, err
			}
			progress(fmt.Sprintf("pushing %s from %s", img.Ref, img.Format))
			digest, err := pusher.Push(ctx, img, progress)
			if err != nil {
				cleanup()
				if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
					return out, fmt.Errorf("the local world in %s is not running (start it again with 'winkube up'): %w", stateDir, err)
				}
				return out, err
			}
			progress(fmt.Sprintf("pushed %s@%s", img.Ref, digest))
			out = append(out, LoadedImage{Ref: img.Ref, Digest: digest, Format: img.Format, Platforms: plats})
		}
		cleanup()
	}
	return out, nil
}
