package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/winkube/winkube/emulator/machines/bootdata"
)

// A boot that fails part-way returns its error; it once stopped a nil
// control plane on the way out and took the whole runtime down with it.
func TestFailedBootReturnsItsError(t *testing.T) {
	dir := t.TempDir()
	// The machine's root is a file: nothing can be written under it.
	if err := os.WriteFile(filepath.Join(dir, "root"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := Start(context.Background(), Config{Dir: dir, Boot: &bootdata.BootData{Role: bootdata.Init,
		Files: []bootdata.File{{Path: "/etc/kubernetes/pki/ca.crt", Content: []byte("x")}}}})
	if err == nil || cp != nil {
		t.Fatalf("Start with an unwritable disk: %v, %v", cp, err)
	}
}
