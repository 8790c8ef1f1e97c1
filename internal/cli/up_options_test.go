package cli

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
)

// TestUpOptionsValidate: what no world can be made of is refused before
// anything starts, as bad input naming the flag.
func TestUpOptionsValidate(t *testing.T) {
	bin, noMetrics, empty := t.TempDir(), t.TempDir(), t.TempDir()
	writeFiles(t, bin, map[string]string{"kube-apiserver": "", "metrics-server": ""})
	writeFiles(t, noMetrics, map[string]string{"kube-apiserver": ""})
	image := filepath.Join(t.TempDir(), "app.tar")
	writeFiles(t, filepath.Dir(image), map[string]string{"app.tar": ""})
	valid := func() upOptions {
		return upOptions{Name: "demo", flavor: flavors.Windows, version: localworld.KubernetesVersion, windowsVersion: "2022",
			controlPlane: 1, linux: 1, windows: 2, timeout: 15 * time.Minute, bootstrapTimeout: localworld.DefaultLocalBootstrapTimeout, bin: bin}
	}
	for _, c := range []struct {
		name   string
		change func(*upOptions)
		want   string // "" for valid
	}{
		{"defaults", func(*upOptions) {}, ""},
		{"three control planes", func(o *upOptions) { o.controlPlane = 3 }, ""},
		{"metrics-server built", func(o *upOptions) { o.metricsServer = true }, ""},
		{"an image", func(o *upOptions) { o.images = []string{image} }, ""},
		{"two control planes", func(o *upOptions) { o.controlPlane = 2 }, "--control-plane-nodes 2: want an odd number"},
		{"Windows Server 2016", func(o *upOptions) { o.windowsVersion = "2016" }, `--windows-version "2016"`},
		{"a zero timeout", func(o *upOptions) { o.timeout = 0 }, "--timeout 0s"},
		{"an unknown flavor", func(o *upOptions) { o.flavor = "bogus" }, "--flavor"},
		{"a NAME no Cluster can have", func(o *upOptions) { o.Name = "Demo" }, "NAME"},
		{"a zero bootstrap timeout", func(o *upOptions) { o.bootstrapTimeout = 0 }, "--bootstrap-timeout 0s: want a positive duration"},
		{"a negative bootstrap timeout", func(o *upOptions) { o.bootstrapTimeout = -time.Minute }, "--bootstrap-timeout -1m0s"},
		{"a missing image", func(o *upOptions) { o.images = []string{filepath.Join(empty, "x.tar")} }, "--image " + filepath.Join(empty, "x.tar")},
		{"a --bin without binaries", func(o *upOptions) { o.bin = empty }, "--bin " + empty + ": kube-apiserver, etcd and kubeadm were not found"},
		{"metrics-server not built", func(o *upOptions) { o.bin, o.metricsServer = noMetrics, true }, "--metrics-server runs the metrics-server"},
	} {
		o := valid()
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}

// TestDownOptionsValidate: down's guard runs in Validate, before anything
// is read further or removed; what it refuses is left as it was.
func TestDownOptionsValidate(t *testing.T) {
	bin, empty := fakeBin(t), t.TempDir()
	world := t.TempDir()
	writeFiles(t, world, worldFiles)
	notWorld := t.TempDir()
	writeFiles(t, notWorld, map[string]string{".bashrc": "x\n", "Documents/thesis.tex": "y\n"})
	home := t.TempDir()
	t.Setenv("HOME", home)
	before := tree(t, notWorld)
	for _, c := range []struct {
		name, stateDir, bin string
		want                string // "" for valid
	}{
		{"a world", world, bin, ""},
		{"the default world, missing", "", bin, "no cluster state in " + filepath.Join(home, ".winkube", "demo") + ": nothing to delete"},
		{"a missing directory", filepath.Join(empty, "gone"), bin, "nothing to delete"},
		{"an empty directory", empty, bin, "--state-dir " + empty + ": " + empty + " is empty or holds no world"},
		{"a user's directory", notWorld, bin, "not a winkube world's state directory; down deletes only a directory 'winkube up' made"},
		{"a --bin without binaries", world, empty, "--bin " + empty},
	} {
		o := downOptions{upOptions{Name: "demo", stateDir: c.stateDir, bin: c.bin}}
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
	if after := tree(t, notWorld); after != before {
		t.Fatalf("Validate changed a directory that is not a world's:\n%s", after)
	}
}
