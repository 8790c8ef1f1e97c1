package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

// fakeWorldState starts a real API server with winkube's CRDs and the
// named Cluster API ones (config/capi/<dir>), and a local world's state
// directory whose management kubeconfig reaches it: what the commands that
// read a world (doctor, plan) are given by --state-dir.
func fakeWorldState(t *testing.T, capiCRDs ...string) (env *testenv.Env, state string) {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Join(root, "config", "crd")}
	for _, d := range capiCRDs {
		dirs = append(dirs, filepath.Join(root, "config", "capi", d))
	}
	env, err = testenv.Start(testenv.Options{Scheme: scheme.New(), CRDDirectoryPaths: dirs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	state = t.TempDir()
	if err := os.WriteFile(filepath.Join(state, localworld.ManagementKubeconfig), env.Environment.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return env, state
}

// commandRunner runs the root command with args after the given words,
// returning what it wrote to its output.
func commandRunner(ctx context.Context, words ...string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		cmd := NewRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(append(append([]string(nil), words...), args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
}
