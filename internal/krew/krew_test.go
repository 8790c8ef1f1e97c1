package krew

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func tarGz(t *testing.T, dir, name string, files map[string]string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for n, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	gz.Close()
	f.Close()
	return path
}

func TestManifestFollowsKrewRules(t *testing.T) {
	dir := t.TempDir()
	linux := tarGz(t, dir, "l.tar.gz", map[string]string{"kubectl-winkube": "#!elf", "LICENSE": "x"})
	win := tarGz(t, dir, "w.tar.gz", map[string]string{"kubectl-winkube.exe": "MZ"})
	data, err := Manifest("v0.3.1", []Archive{
		{OS: "linux", Arch: "amd64", Path: linux, URI: "https://example.test/l.tar.gz"},
		{OS: "windows", Arch: "amd64", Path: win, URI: "https://example.test/w.tar.gz"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var p Plugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("the manifest does not read back: %v\n%s", err, data)
	}
	if err := Validate(p); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(linux)
	sum := sha256.Sum256(raw)
	if p.Spec.Platforms[0].Sha256 != hex.EncodeToString(sum[:]) {
		t.Errorf("linux sha256 %s is not the archive's", p.Spec.Platforms[0].Sha256)
	}
	if p.Spec.Platforms[1].Bin != "kubectl-winkube.exe" || p.Metadata.Name != "winkube" || p.Spec.Version != "v0.3.1" {
		t.Errorf("manifest: %+v", p)
	}
	for _, want := range []string{"apiVersion: krew.googlecontainertools.github.com/v1alpha2", "kind: Plugin", "matchLabels:", "os: windows"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("manifest lacks %q", want)
		}
	}
}

func TestManifestRefusesWhatKrewRefuses(t *testing.T) {
	dir := t.TempDir()
	good := tarGz(t, dir, "g.tar.gz", map[string]string{"kubectl-winkube": "bin"})
	noBin := tarGz(t, dir, "n.tar.gz", map[string]string{"winkube": "bin"})
	nested := tarGz(t, dir, "d.tar.gz", map[string]string{"dist/kubectl-winkube": "bin"})
	notGz := filepath.Join(dir, "plain")
	if err := os.WriteFile(notGz, []byte("plain"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := func(os, path string) Archive {
		return Archive{OS: os, Arch: "amd64", Path: path, URI: "https://example.test/" + filepath.Base(path)}
	}
	cases := map[string]struct {
		version string
		arch    []Archive
		want    string
	}{
		"no v":            {"0.1.0", []Archive{a("linux", good)}, "semantic version"},
		"not semver":      {"v1.2", []Archive{a("linux", good)}, "semantic version"},
		"no platform":     {"v0.1.0", nil, "no platform"},
		"binary missing":  {"v0.1.0", []Archive{a("linux", noBin)}, "does not hold kubectl-winkube"},
		"binary nested":   {"v0.1.0", []Archive{a("linux", nested)}, "does not hold kubectl-winkube"},
		"windows no .exe": {"v0.1.0", []Archive{a("windows", good)}, "kubectl-winkube.exe"},
		"not a tar.gz":    {"v0.1.0", []Archive{a("linux", notGz)}, "not a .tar.gz"},
		"same platform":   {"v0.1.0", []Archive{a("linux", good), a("linux", good)}, "same selector"},
	}
	for name, c := range cases {
		if _, err := Manifest(c.version, c.arch); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	p := Plugin{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: "winkube"}, Spec: Spec{Version: "v0.1.0", ShortDescription: "two\nlines",
		Platforms: []Platform{{URI: "u", Sha256: strings.Repeat("a", 64), Bin: "b", Selector: Selector{MatchLabels: map[string]string{"os": "linux"}}}}}}
	if err := Validate(p); err == nil {
		t.Error("a two-line short description passed")
	}
	p.Spec.ShortDescription = "one"
	p.Spec.Platforms[0].Selector.MatchLabels["distro"] = "debian"
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "os and arch only") {
		t.Errorf("a distro selector: %v", err)
	}
	p.Spec.Platforms[0].Selector.MatchLabels = map[string]string{"os": "linux"}
	p.Spec.Platforms[0].Sha256 = strings.Repeat("A", 64)
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("upper-case sha256: %v", err)
	}
}

// What the release tool packs, Manifest accepts: the binary at the top,
// named for its OS.
func TestPackedArchivesMakeAManifest(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "winkube")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	var archives []Archive
	for _, osName := range []string{"linux", "darwin", "windows"} {
		path := filepath.Join(dir, osName+".tar.gz")
		if err := Pack(path, bin, osName); err != nil {
			t.Fatal(err)
		}
		archives = append(archives, Archive{OS: osName, Arch: "arm64", Path: path, URI: "https://example.test/" + osName + ".tar.gz"})
	}
	data, err := Manifest("v0.1.0", archives)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(data), "sha256:") != 3 || !strings.Contains(string(data), "bin: kubectl-winkube.exe") {
		t.Fatalf("manifest:\n%s", data)
	}
	if err := Pack(filepath.Join(dir, "x.tar.gz"), filepath.Join(dir, "missing"), "linux"); err == nil {
		t.Error("packing a missing binary succeeded")
	}
}
