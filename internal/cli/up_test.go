package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
)

// TestUpAndDownRefuseBadInput: mistakes are refused before anything starts,
// with what to change.
func TestUpAndDownRefuseBadInput(t *testing.T) {
	bin := t.TempDir()
	dir := t.TempDir()
	world := t.TempDir()
	writeFiles(t, world, worldFiles)
	// The control plane's binaries without metrics-server, which
	// --metrics-server's pod runs.
	noMetrics := t.TempDir()
	writeFiles(t, noMetrics, map[string]string{"kube-apiserver": ""})
	// Without --state-dir a world lives in ~/.winkube/NAME, NAME winkube
	// when it is left out.
	home := t.TempDir()
	t.Setenv("HOME", home)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"up", "--bin", bin, "--state-dir", dir}, "were not found in"},
		{[]string{"up", "--metrics-server", "--bin", noMetrics, "--state-dir", t.TempDir()}, "has none: build it with `make tools`"},
		{[]string{"down", "--state-dir", filepath.Join(dir, "missing")}, "nothing to delete"},
		// down's own settings pass up's flag checks: it gets as far as
		// looking for the binaries (it once refused every run over a zero
		// --timeout it has no flag for).
		{[]string{"down", "--bin", bin, "--state-dir", world}, "were not found in"},
		// An empty directory is no world: there is nothing to delete.
		{[]string{"down", "--bin", bin, "--state-dir", dir}, "is empty or holds no world"},
		{[]string{"down"}, "no cluster state in " + filepath.Join(home, ".winkube", "winkube") + ":"},
		{[]string{"down", "demo"}, "no cluster state in " + filepath.Join(home, ".winkube", "demo") + ":"},
	}
	for _, c := range cases {
		root := NewRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(c.args)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("winkube %s: %v, want an error saying %q", strings.Join(c.args, " "), err, c.want)
		}
	}
	o := &upOptions{controlPlane: 2, windowsVersion: "2022", version: localworld.KubernetesVersion, stateDir: dir, bin: "../../bin"}
	if _, err := o.world("x", nil); err == nil || !strings.Contains(err.Error(), "odd number") {
		t.Errorf("2 control planes: %v", err)
	}
	o = &upOptions{controlPlane: 1, windowsVersion: "2016", version: localworld.KubernetesVersion, stateDir: dir, bin: "../../bin"}
	if _, err := o.world("x", nil); err == nil || !strings.Contains(err.Error(), "2019, 2022 or 2025") {
		t.Errorf("Windows 2016: %v", err)
	}
}

// TestUpKeepsClientGoLogsInTheStateDir: what client-go's code says through
// klog while a world runs (a simulated kubelet's watch ended by its
// node's deletion: seen in the terminal of a 1,001-node world) goes to
// the state directory's winkube.log with the controllers' logs, not to
// the terminal that shows the progress.
func TestUpKeepsClientGoLogsInTheStateDir(t *testing.T) {
	dir := t.TempDir()
	o := &upOptions{controlPlane: 1, linux: 1, windows: 1, flavor: flavors.Windows, windowsVersion: "2022", version: localworld.KubernetesVersion, stateDir: dir, bin: "../../bin", timeout: time.Minute, bootstrapTimeout: localworld.DefaultLocalBootstrapTimeout}
	if _, err := o.world("x", nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(klog.ClearLogger)
	klog.ErrorS(errors.New("context canceled"), "Failed to watch", "reflector", "pkg/mod/k8s.io/client-go/tools/cache/reflector.go:343")
	got, err := os.ReadFile(filepath.Join(dir, "winkube.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "Failed to watch") || !strings.Contains(string(got), "context canceled") {
		t.Fatalf("winkube.log after a klog error:\n%s\nwant the error in it", got)
	}
}
