package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/winkube/winkube/internal/flavors"
)

// TestGenerateClusterOptionsValidate: input that is wrong whatever the
// files and the flavor hold is refused before anything is read, as bad
// input (exit code 2) naming the flag to change.
func TestGenerateClusterOptionsValidate(t *testing.T) {
	valid := func() generateClusterOptions {
		// The flags' defaults.
		return generateClusterOptions{Name: "demo", Flavor: "windows", WindowsVersion: "2022", Output: "yaml", Admission: true,
			Cluster: flavors.Options{CalicoTyphaReplicas: flavors.DefaultTyphaReplicas}}
	}
	for _, c := range []struct {
		name   string
		change func(*generateClusterOptions)
		want   string // "" for valid
	}{
		{"defaults", func(*generateClusterOptions) {}, ""},
		{"json", func(g *generateClusterOptions) { g.Output = "json" }, ""},
		{"no Windows version", func(g *generateClusterOptions) { g.WindowsVersion = "" }, ""},
		{"2025", func(g *generateClusterOptions) { g.WindowsVersion = "2025" }, ""},
		{"template without a name", func(g *generateClusterOptions) { g.Name, g.ClusterctlTemplate = "", true }, ""},
		{"an unknown format", func(g *generateClusterOptions) { g.Output = "xml" }, `--output "xml": use one of yaml, json`},
		{"a file as the format", func(g *generateClusterOptions) { g.Output = "out/c.yaml" }, "to write a file use --write-to out/c.yaml"},
		{"Windows Server 2016", func(g *generateClusterOptions) { g.WindowsVersion = "2016" }, `--windows-version "2016": use 2019, 2022 or 2025`},
		{"a template with a name", func(g *generateClusterOptions) { g.ClusterctlTemplate = true }, `leave out NAME "demo"`},
		{"a template as JSON", func(g *generateClusterOptions) { g.Name, g.ClusterctlTemplate, g.Output = "", true, "json" }, "a clusterctl template is YAML"},
		{"three Typhas", func(g *generateClusterOptions) { g.Cluster.CalicoTyphaReplicas = 3 }, ""},
		{"no Typha", func(g *generateClusterOptions) { g.Cluster.CalicoTyphaReplicas = 0 }, "--calico-typha-replicas 0: every Felix finds its Typha"},
	} {
		g := valid()
		c.change(&g)
		wantBadInput(t, c.name, g.Validate(), c.want)
	}
}

// wantBadInput checks one case of an options' Validate table: no error
// when want is "", else bad input (exit code 2) whose message says want.
func wantBadInput(t *testing.T, name string, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		return
	}
	var u *UsageError
	if err == nil || !errors.As(err, &u) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want bad input with %q", name, err, want)
	}
}
