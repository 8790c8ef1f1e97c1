package localworld_test

import (
	"testing"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
)

// TestWorldRunsTheOperatorsTyphas: a world's Calico runs as many Typhas as
// the tigera operator scales to for its nodes (flavors.TyphaReplicas), the
// count CAPZ's clusters of that size run, not the manifest's fixed 1.
func TestWorldRunsTheOperatorsTyphas(t *testing.T) {
	for _, c := range []struct {
		cp, linux, windows int32
		want               int32
	}{
		{1, 1, 2, 2}, {1, 100, 400, 4}, {1, 200, 800, 7}, {1, 0, 0, 1},
		// One Linux node to run Typha on.
		{1, 0, 4, 1},
	} {
		o := localworld.Options{Name: "w", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3",
			ControlPlaneNodes: c.cp, LinuxNodes: c.linux, WindowsNodes: c.windows}
		if got := o.ClusterOptions("ssh-ed25519 AAAA").CalicoTyphaReplicas; got != c.want {
			t.Errorf("%d+%d+%d: %d Typha replicas, want %d", c.cp, c.linux, c.windows, got, c.want)
		}
	}
}
