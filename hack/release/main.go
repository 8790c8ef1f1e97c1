// Command release writes what `make release` and `make image` publish: the
// clusterctl provider repository of a version, and the manager image as a
// tarball. It is a thin shell over internal/release.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/winkube/winkube/internal/release"
)

func main() {
	var (
		version = flag.String("version", "", "release version, such as v0.1.0")
		image   = flag.String("image", "", "manager image reference the components run, such as ghcr.io/winkube/winkube-manager:v0.1.0")
		out     = flag.String("out", "out", "folder to write into")
		binary  = flag.String("binary", "", "with -image-tarball: the static manager binary to package")
		caFile  = flag.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "with -image-tarball: PEM bundle of trusted roots")
		tarPath = flag.String("image-tarball", "", "write the manager image to this tarball instead of the repository")
	)
	flag.Parse()
	if err := run(*version, *image, *out, *binary, *caFile, *tarPath); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(version, image, out, binary, caFile, tarPath string) error {
	if image == "" {
		return fmt.Errorf("-image is required")
	}
	if tarPath != "" {
		img, err := release.Image(release.ImageOptions{Binary: binary, CACertificates: caFile})
		if err != nil {
			return err
		}
		size, err := release.WriteImageTarball(tarPath, image, img)
		if err != nil {
			return err
		}
		layoutDir := strings.TrimSuffix(tarPath, ".tar") + ".oci"
		if err := release.WriteImageLayout(layoutDir, image, img); err != nil {
			return err
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s (docker load, crane push) and %s/ (OCI layout): %s %s, %d bytes\n", tarPath, layoutDir, image, digest, size)
		return nil
	}
	dir, err := release.WriteRepository(out, release.RepositoryOptions{Version: version, Image: image})
	if err != nil {
		return err
	}
	fmt.Println(dir)
	return nil
}
