package testenv

import (
	"crypto/sha256"
	"encoding/hex"
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
	path string
	err  error
}

// SharedWinkube builds the binary once per test process, for packages whose
// tests run it more than once. It lives in a folder of the temporary
// directory named after the test's package folder, reused (and rebuilt,
// incrementally) by later runs like a build cache, so that no TestMain is
// needed to remove it and packages testing side by side do not share it.
func SharedWinkube() (string, error) {
	shared.once.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			shared.err = err
			return
		}
		sum := sha256.Sum256([]byte(wd))
		dir := filepath.Join(os.TempDir(), "winkube-test-bin-"+hex.EncodeToString(sum[:6]))
		if shared.err = os.MkdirAll(dir, 0o755); shared.err == nil {
			shared.path, shared.err = BuildWinkube(dir)
		}
	})
	return shared.path, shared.err
}
