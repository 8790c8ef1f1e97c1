// Package krew writes the krew plugin manifest of kubectl-winkube for a set
// of release archives, so that 'kubectl krew install --manifest=winkube.yaml
// --archive=...' (and the krew index) install winkube as 'kubectl winkube'.
// The manifest's rules are krew's own, checked here so that a manifest krew
// would refuse is never written.
package krew

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// APIVersion and Kind of a krew plugin manifest.
const (
	APIVersion = "krew.googlecontainertools.github.com/v1alpha2"
	Kind       = "Plugin"
	// Name is the plugin's name: kubectl finds kubectl-winkube.
	Name = "winkube"
)

// Plugin is a krew plugin manifest.
type Plugin struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

type Metadata struct {
	Name string `json:"name"`
}

type Spec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage,omitempty"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description,omitempty"`
	Caveats          string     `json:"caveats,omitempty"`
	Platforms        []Platform `json:"platforms"`
}

type Platform struct {
	Selector Selector `json:"selector"`
	URI      string   `json:"uri"`
	Sha256   string   `json:"sha256"`
	Files    []File   `json:"files,omitempty"`
	Bin      string   `json:"bin"`
}

type Selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type File struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Archive is one release archive: a .tar.gz holding the binary.
type Archive struct {
	OS, Arch string
	// Path is the archive on this machine, hashed into the manifest.
	Path string
	// URI is where users download it from.
	URI string
}

// BinName is the plugin binary inside an archive for os.
func BinName(os string) string {
	if os == "windows" {
		return "kubectl-winkube.exe"
	}
	return "kubectl-winkube"
}

// Manifest builds the manifest for version and archives, checking it as
// krew does and checking that every archive holds its binary.
func Manifest(version string, archives []Archive) ([]byte, error) {
	p := Plugin{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: Name}, Spec: Spec{
		Version:          version,
		Homepage:         "https://github.com/winkube/winkube",
		ShortDescription: "SSH, RDP and logs of mixed Linux/Windows cluster nodes",
		Description: `Reaches the nodes of Cluster API clusters on Azure (winkube's, and those of
Cluster API Provider Azure's layout) through the API server's host as jump
host: 'kubectl winkube ssh NODE' logs in or runs a command, 'kubectl winkube
rdp NODE' tunnels Remote Desktop to a Windows node, 'kubectl winkube logs NODE'
collects kubelet, containerd, CNI and cloud-init/cloudbase-init logs.
'kubectl winkube generate cluster' prints a mixed cluster's manifests.`,
		Caveats: `Run against a management cluster (--kubeconfig); nodes are found from its
Machines and AzureMachines. SSH keys come from --identity, ~/.ssh or ssh-agent.`,
	}}
	for _, a := range archives {
		sum, err := checkArchive(a.Path, BinName(a.OS))
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", a.OS, a.Arch, err)
		}
		p.Spec.Platforms = append(p.Spec.Platforms, Platform{
			Selector: Selector{MatchLabels: map[string]string{"os": a.OS, "arch": a.Arch}},
			URI:      a.URI, Sha256: sum, Bin: BinName(a.OS),
			Files: []File{{From: BinName(a.OS), To: "."}},
		})
	}
	if err := Validate(p); err != nil {
		return nil, err
	}
	return yaml.Marshal(p)
}

// checkArchive hashes a .tar.gz and checks it holds bin at its top.
func checkArchive(file, bin string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	gz, err := gzip.NewReader(io.TeeReader(f, h))
	if err != nil {
		return "", fmt.Errorf("%s is not a .tar.gz: %w", file, err)
	}
	tr := tar.NewReader(gz)
	found := false
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		if path.Clean(hdr.Name) == bin && hdr.Typeflag == tar.TypeReg {
			found = true
		}
	}
	// The rest of the stream (gzip trailer, padding) counts in the hash.
	if _, err := io.Copy(io.Discard, io.TeeReader(f, h)); err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("%s does not hold %s at its top", file, bin)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var (
	safeName  = regexp.MustCompile(`^[\w-]+$`)
	sha256Hex = regexp.MustCompile(`^[a-f0-9]{64}$`)
	semver    = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
)

// Validate applies krew's rules for a plugin manifest: apiVersion and kind,
// a safe name, a one-line short description, a semantic version with its
// leading v, and platforms each with a URI, a SHA-256, a binary, file
// operations with both ends, and a selector on os and arch only.
func Validate(p Plugin) error {
	switch {
	case p.APIVersion != APIVersion:
		return fmt.Errorf("apiVersion %q: krew reads %s", p.APIVersion, APIVersion)
	case p.Kind != Kind:
		return fmt.Errorf("kind %q: want %s", p.Kind, Kind)
	case !safeName.MatchString(p.Metadata.Name):
		return fmt.Errorf("name %q: krew wants letters, digits, '_' and '-'", p.Metadata.Name)
	case p.Spec.ShortDescription == "" || strings.ContainsAny(p.Spec.ShortDescription, "\r\n"):
		return errors.New("shortDescription: krew wants one line")
	case !semver.MatchString(p.Spec.Version):
		return fmt.Errorf("version %q: krew wants a semantic version such as v0.1.0", p.Spec.Version)
	case len(p.Spec.Platforms) == 0:
		return errors.New("no platform: krew needs at least one")
	}
	seen := map[string]bool{}
	for _, pl := range p.Spec.Platforms {
		key := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		switch {
		case pl.URI == "":
			return fmt.Errorf("%s: no uri", key)
		case !sha256Hex.MatchString(pl.Sha256):
			return fmt.Errorf("%s: sha256 %q is not 64 lower-case hex digits", key, pl.Sha256)
		case pl.Bin == "":
			return fmt.Errorf("%s: no bin", key)
		case len(pl.Selector.MatchLabels) == 0:
			return fmt.Errorf("%s: an empty selector matches every machine", key)
		case seen[key]:
			return fmt.Errorf("%s: two platforms with the same selector", key)
		}
		seen[key] = true
		for k := range pl.Selector.MatchLabels {
			if k != "os" && k != "arch" {
				return fmt.Errorf("%s: selector key %q: krew selects on os and arch only", key, k)
			}
		}
		for _, f := range pl.Files {
			if f.From == "" || f.To == "" {
				return fmt.Errorf("%s: a file operation needs from and to", key)
			}
		}
	}
	return nil
}

// Pack writes a release archive: a .tar.gz holding the binary at bin as the
// plugin's binary for goos, at the archive's top, as the manifest says.
func Pack(dest, bin, goos string) error {
	src, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	f, err := os.Create(dest)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: BinName(goos), Mode: 0o755, Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg}); err != nil {
		f.Close()
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		f.Close()
		return err
	}
	for _, c := range []io.Closer{tw, gz, f} {
		if err := c.Close(); err != nil {
			return err
		}
	}
	return nil
}
