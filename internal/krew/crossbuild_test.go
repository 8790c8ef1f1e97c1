package krew

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPluginBuildsForWindows: the plugin's archives (make krew) carry the
// one winkube binary for macOS and Windows too, so a Linux-only call in a
// file without a build constraint (a parent-death signal, flock, SIGUSR1)
// breaks them while every Linux test passes. Windows has the fewest of
// those calls, so its build stands for both; the binary is packed as the
// release packs it.
func TestPluginBuildsForWindows(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubectl-winkube.exe")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/winkube/winkube/cmd/winkube")
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go build ./cmd/winkube: %v\n%s", err, out)
	}
	head := make([]byte, 2)
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Read(head)
	f.Close()
	if err != nil || string(head) != "MZ" {
		t.Fatalf("the Windows build is not a PE executable (starts %q, %v)", head, err)
	}
	if err := Pack(filepath.Join(dir, "windows.tar.gz"), bin, "windows"); err != nil {
		t.Fatal(err)
	}
	if _, err := Manifest("v0.1.0", []Archive{{OS: "windows", Arch: "amd64", Path: filepath.Join(dir, "windows.tar.gz"), URI: "https://example.test/windows.tar.gz"}}); err != nil {
		t.Fatal(err)
	}
}
