// Command krew packs kubectl-winkube binaries into release archives and
// writes the krew plugin manifest for them:
//
//	go run ./hack/krew -version v0.1.0 -out out/krew linux/amd64=PATH ...
//
// 'make krew' builds the binaries and runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/winkube/winkube/internal/krew"
)

func main() {
	version := flag.String("version", "", "release version, such as v0.1.0")
	out := flag.String("out", "out/krew", "folder for the archives and winkube.yaml")
	base := flag.String("base-url", "", "where the archives are published (default: the GitHub release of -version)")
	flag.Parse()
	if err := run(*version, *out, *base, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
}

func run(version, out, base string, bins []string) error {
	if version == "" || len(bins) == 0 {
		return fmt.Errorf("usage: krew -version vX.Y.Z [-out DIR] [-base-url URL] OS/ARCH=BINARY ...")
	}
	if base == "" {
		base = "https://github.com/winkube/winkube/releases/download/" + version
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var archives []krew.Archive
	for _, b := range bins {
		platform, bin, ok := strings.Cut(b, "=")
		goos, arch, ok2 := strings.Cut(platform, "/")
		if !ok || !ok2 {
			return fmt.Errorf("%q: want OS/ARCH=BINARY", b)
		}
		name := fmt.Sprintf("kubectl-winkube_%s_%s_%s.tar.gz", version, goos, arch)
		path := filepath.Join(out, name)
		if err := krew.Pack(path, bin, goos); err != nil {
			return err
		}
		archives = append(archives, krew.Archive{OS: goos, Arch: arch, Path: path, URI: strings.TrimSuffix(base, "/") + "/" + name})
	}
	manifest, err := krew.Manifest(version, archives)
	if err != nil {
		return err
	}
	dest := filepath.Join(out, krew.Name+".yaml")
	if err := os.WriteFile(dest, manifest, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", dest)
	return nil
}
