package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// BuildWinkube builds the winkube binary into dir, statically as `make
// image` does, for tests that run it as its own process: a manager that is
// killed, or two that compete for one Lease, need processes of their own.
func BuildWinkube(dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "winkube")
	cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", out, "./cmd/winkube")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testenv: building winkube: %w\n%s", err, b)
	}
	return out, nil
}

var shared struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// SharedWinkube builds the binary once per test process, for packages whose
// tests run it more than once; RemoveSharedWinkube (from TestMain) deletes it.
func SharedWinkube() (string, error) {
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "winkube-test-bin-"); shared.err == nil {
			shared.path, shared.err = BuildWinkube(shared.dir)
		}
	})
	return shared.path, shared.err
}

// RemoveSharedWinkube deletes what SharedWinkube built.
func RemoveSharedWinkube() {
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
}
