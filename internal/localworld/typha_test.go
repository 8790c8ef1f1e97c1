package localworld_test

import (
	"strings"
	"testing"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/scheme"
)

// TestWorldRunsCalicoWithoutTypha: the world's nodes have loopback
// addresses, which kube-apiserver refuses in Endpoints and EndpointSlices,
// so a host-network Typha would have no endpoints and no Felix would find
// it (the 1+1+2 world's Linux calico-node stayed not Ready, "Typha
// discovery enabled but discovery failed"). The world's Calico therefore
// runs as calico-vxlan.yaml ships it; the same options for Azure ship
// Typha.
func TestWorldRunsCalicoWithoutTypha(t *testing.T) {
	o := localworld.Options{Name: "w", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3",
		ControlPlaneNodes: 1, LinuxNodes: 1, WindowsNodes: 2}
	render := func(fo flavors.Options) string {
		objs, err := flavors.Generate(o.Flavor, fo)
		if err != nil {
			t.Fatal(err)
		}
		y, err := flavors.YAML(scheme.New(), objs)
		if err != nil {
			t.Fatal(err)
		}
		return string(y)
	}
	world := o.ClusterOptions("ssh-ed25519 AAAA")
	got := render(world)
	if strings.Contains(got, "name: calico-typha") || !strings.Contains(got, "typha_service_name: none") {
		t.Errorf("the world's flavor ships Typha (CalicoWithoutTypha %v)", world.CalicoWithoutTypha)
	}
	world.CalicoWithoutTypha = false
	if azure := render(world); !strings.Contains(azure, "name: calico-typha") || strings.Contains(azure, "typha_service_name: none") {
		t.Error("the flavor without the world's setting ships no Typha")
	}
}
