// Package config carries the generated manifests winkube installs into a
// management cluster of its own (`winkube up`): winkube's CRDs and webhook
// configuration, the manager's RBAC, and Cluster API's CRDs, as `make generate`
// writes them; `make release` builds the provider's components from them too.
package config

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed crd/*.yaml capi/*/*.yaml webhook/*.yaml rbac/*.yaml
var files embed.FS

// FS is the generated manifests, by their paths under config/ (crd/,
// capi/<provider>/, webhook/, rbac/), for code that builds from them.
func FS() fs.FS { return files }

// Write copies the manifests under dir (crd/, capi/<provider>/, webhook/)
// for tools that read directories.
func Write(dir string) error {
	return fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		out := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
}
