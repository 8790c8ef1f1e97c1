package localworld

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateDirClaims: up takes a new or empty directory, or a world's (a
// world from before manifests included); never a folder with a user's
// files in it. A running world's directory cannot be removed, and its
// lock names the process that holds it.
func TestStateDirClaims(t *testing.T) {
	user := t.TempDir()
	if err := os.WriteFile(filepath.Join(user, "thesis.tex"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ClaimStateDir(user, "demo"); err == nil || !strings.Contains(err.Error(), "thesis.tex") {
		t.Errorf("a folder with a user's file: %v, want a refusal naming it", err)
	}
	if _, err := os.Stat(filepath.Join(user, WorldFile)); !os.IsNotExist(err) {
		t.Errorf("the refused folder got a manifest: %v", err)
	}

	legacy := t.TempDir()
	for _, d := range []string{"management-etcd", "machines"} {
		if err := os.Mkdir(filepath.Join(legacy, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"lock", "emulator.json", "old.kubeconfig"} {
		if err := os.WriteFile(filepath.Join(legacy, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckWorld(legacy); err != nil {
		t.Errorf("a world from before manifests: %v", err)
	}
	if err := ClaimStateDir(legacy, "demo"); err != nil {
		t.Fatalf("claiming a world from before manifests: %v", err)
	}
	m, ok, err := readManifest(legacy)
	if err != nil || !ok || strings.Join(m.Names, ",") != "old,demo" {
		t.Errorf("its manifest: %+v %v %v, want the names old (its kubeconfig) and demo", m, ok, err)
	}

	lock, err := lockState(legacy)
	if err != nil {
		t.Fatal(err)
	}
	if pid, held, err := Holder(legacy); err != nil || !held || pid != os.Getpid() {
		t.Errorf("Holder of a locked world: %d %v %v, want this process %d", pid, held, err, os.Getpid())
	}
	if _, err := RemoveWorld(legacy); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("removing a running world: %v", err)
	}
	lock.Close()
	if kept, err := RemoveWorld(legacy); err != nil || len(kept) != 0 {
		t.Fatalf("removing a stopped world: %v, kept %v", err, kept)
	}
	if _, err := os.Stat(legacy); !os.IsNotExist(err) {
		t.Errorf("the world's directory after its removal: %v", err)
	}
}

// TestStateDirMustBePrivate: a state directory its group or other users
// can write, or that another user owns, is refused by up and by image
// load, with what to change: another user could swap the world's files or
// its registry push socket there. One of the user's own, 0700, is taken.
func TestStateDirMustBePrivate(t *testing.T) {
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := ClaimStateDir(shared, "demo"); err == nil || !strings.Contains(err.Error(), "chmod go-w "+shared) {
		t.Errorf("a group-writable directory: %v, want a refusal saying to chmod go-w it", err)
	}
	if _, err := os.Stat(filepath.Join(shared, WorldFile)); !os.IsNotExist(err) {
		t.Errorf("the refused directory got a manifest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(shared, RegistryFile), []byte("127.0.0.1:5000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadImages(t.Context(), shared, []string{"app.tar"}, "", nil); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("image load into a group-writable state directory: %v, want a refusal", err)
	}

	// Another user's directory: as root, one given away; otherwise the
	// root directory, which root owns.
	foreign := "/"
	if os.Getuid() == 0 {
		foreign = t.TempDir()
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := ClaimStateDir(foreign, "demo"); err == nil || !strings.Contains(err.Error(), "not to you") {
		t.Errorf("another user's directory %s: %v, want a refusal", foreign, err)
	}

	own := filepath.Join(t.TempDir(), "new")
	if err := ClaimStateDir(own, "demo"); err != nil {
		t.Fatalf("a new directory: %v", err)
	}
	if fi, err := os.Stat(own); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("a new state directory: %v %v, want mode 0700", fi, err)
	}
}
