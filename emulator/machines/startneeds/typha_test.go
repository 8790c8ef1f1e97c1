package startneeds

import (
	"slices"
	"testing"
)

// TestTyphaSyncersAreUpstreams: the calico-typha entry lists what
// Typha's four pipelines list at v3.30.7 (typhaSyncersSrc), in
// daemon.go's order: the Felix syncer's kinds (felixsyncerv1.go, as
// calico-node's Felix lists them without Typha), bgpsyncer.go's with
// Calico IPAM, tunnelipsyncer.go's and nodestatussyncer.go's; 33 lists
// in all, nodes and IP pools three times.
func TestTyphaSyncersAreUpstreams(t *testing.T) {
	want := map[string][]string{
		"bgp":                  {"ippools.crd.projectcalico.org", "bgpconfigurations.crd.projectcalico.org", "nodes", "bgppeers.crd.projectcalico.org", "bgpfilters.crd.projectcalico.org", "blockaffinities.crd.projectcalico.org"},
		"tunnel-ip-allocation": {"ippools.crd.projectcalico.org", "nodes"},
		"node-status":          {"caliconodestatuses.crd.projectcalico.org"},
	}
	var typha, felix *Component
	for _, c := range Catalog() {
		switch c.Name {
		case "calico-typha":
			typha = &c
		case "calico-node":
			felix = &c
		}
	}
	if typha == nil || felix == nil {
		t.Fatal("no calico-typha or calico-node in the catalog")
	}
	var types []string
	lists := 0
	for _, s := range typha.Syncers {
		types = append(types, s.Type)
		lists += len(s.Watches)
		var got []string
		for _, w := range s.Watches {
			got = append(got, w.String())
		}
		if s.Type == "felix" {
			if !slices.Equal(s.Watches, felix.Watches) {
				t.Errorf("Typha's felix syncer lists %q, calico-node's Felix %v", got, felix.Watches)
			}
			continue
		}
		if !slices.Equal(got, want[s.Type]) {
			t.Errorf("Typha's %s syncer lists %q, want %q", s.Type, got, want[s.Type])
		}
	}
	if wantTypes := []string{"felix", "bgp", "tunnel-ip-allocation", "node-status"}; !slices.Equal(types, wantTypes) {
		t.Errorf("Typha's syncer types %q, want %q", types, wantTypes)
	}
	if lists != 33 {
		t.Errorf("one Typha lists %d kinds, want 33", lists)
	}
	if len(typha.Watches) != 0 || typha.Effect != EffectTyphaServer || typha.Client != calicoClient || typha.Sync != felixSync || typha.OS != "linux" {
		t.Errorf("calico-typha: watches %d, effect %q, client %+v, sync %+v, os %q: want its syncers run by the program, %q, Calico's client and watcher cache, linux",
			len(typha.Watches), typha.Effect, typha.Client, typha.Sync, typha.OS, EffectTyphaServer)
	}
}

// Felix takes Typha from FELIX_TYPHAK8SSERVICENAME unless it is empty or
// "none" (any case), in FELIX_TYPHAK8SNAMESPACE or kube-system.
func TestFelixTyphaFromEnv(t *testing.T) {
	for _, name := range []string{"calico-node", "calico-node-windows"} {
		var tc *TyphaClient
		for _, c := range Catalog() {
			if c.Name == name {
				tc = c.Typha
			}
		}
		if tc == nil {
			t.Fatalf("%s has no Typha client", name)
		}
		for _, c := range []struct {
			env         map[string]string
			service, ns string
		}{
			{map[string]string{}, "", "kube-system"},
			{map[string]string{"FELIX_TYPHAK8SSERVICENAME": "none"}, "", "kube-system"},
			{map[string]string{"FELIX_TYPHAK8SSERVICENAME": "None"}, "", "kube-system"},
			{map[string]string{"FELIX_TYPHAK8SSERVICENAME": "calico-typha"}, "calico-typha", "kube-system"},
			{map[string]string{"FELIX_TYPHAK8SSERVICENAME": "calico-typha", "FELIX_TYPHAK8SNAMESPACE": "calico-system"}, "calico-typha", "calico-system"},
		} {
			if s, ns := tc.Service(c.env), tc.Namespace(c.env); s != c.service || (s != "" && ns != c.ns) {
				t.Errorf("%s with %v: Typha %q in %q, want %q in %q", name, c.env, s, ns, c.service, c.ns)
			}
		}
		if tc.PortName != "calico-typha" {
			t.Errorf("%s looks for port %q, want calico-typha", name, tc.PortName)
		}
	}
}
