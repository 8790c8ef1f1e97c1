package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/winkube/winkube/internal/testenv"
)

// runAsWinkube, set to 1 in a child process's environment, makes this test
// binary run as `winkube` with the child's arguments: a test that needs a
// manager in a process of its own (one it can SIGTERM, two competing for a
// Lease) re-executes itself instead of building and linking cmd/winkube,
// which cost minutes of a loaded 2-core machine in `go test -short`. The
// test binary holds the same CLI as the command (cmd/winkube only calls
// Execute), and the child handles signals as cmd/winkube's main does.
const runAsWinkube = "WINKUBE_TEST_RUN_AS_WINKUBE"

func TestMain(m *testing.M) {
	if os.Getenv(runAsWinkube) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		signal.Ignore(syscall.SIGPIPE)
		code := Execute(ctx, "winkube", os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	opts, err := managementAPIOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	managementAPI.Options = opts
	if managerCommandAPI.Options, err = managerEnvOptions(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.Prestart(managementAPI, managerCommandAPI)
	code := m.Run()
	testenv.StopShared(managementAPI, managerCommandAPI)
	os.Exit(code)
}

// winkubeProcess is the command and environment that run this test binary
// as `winkube` (see runAsWinkube).
func winkubeProcess(t *testing.T) (bin string, env []string) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return bin, append(os.Environ(), runAsWinkube+"=1")
}
