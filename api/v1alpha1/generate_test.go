package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/winkube/winkube/internal/testenv"
)

// TestGeneratedFilesAreFresh regenerates deepcopy, CRDs and webhook
// configuration into a temporary folder and compares them with what is
// committed: a type change without `make generate` fails here.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(root, "hack", "generate.sh"), out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate.sh: %v\n%s", err, b)
	}
	var compared int
	err = filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, path)
		want, _ := os.ReadFile(path)
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s is generated but not committed: run make generate", rel)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make generate", rel)
		}
		compared++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Committed files that generation no longer produces are stale too.
	for _, dir := range []string{"config/crd", "config/webhook", "config/capi", "config/rbac"} {
		_ = filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if _, err := os.Stat(filepath.Join(out, rel)); err != nil {
				t.Errorf("%s is committed but no longer generated: run make generate", rel)
			}
			return nil
		})
	}
	if compared < 20 {
		t.Fatalf("compared only %d generated files; generation produced less than expected", compared)
	}
}
