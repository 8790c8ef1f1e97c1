package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
