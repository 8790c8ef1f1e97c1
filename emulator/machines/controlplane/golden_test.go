package controlplane

import (
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/emulator/internal/golden"
	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/egress"
)

// staticPodsCase is one testdata/staticpods/<case>.input.yaml: the
// ClusterConfiguration a control-plane VM boots from and where it stands.
type staticPodsCase struct {
	NodeName string                        `json:"nodeName"`
	Host     string                        `json:"host"`
	Cluster  bootdata.ClusterConfiguration `json:"cluster"`
	// InitialCluster is etcd's member list for a joining machine ("" for
	// the first one).
	InitialCluster string `json:"initialCluster,omitempty"`
	// Egress: the API server's connections into the cluster go through
	// the machine's network (Config.Dial set).
	Egress bool `json:"egress,omitempty"`
}

// TestStaticPodsGolden renders the four static pods (the flags kubeadm
// writes, extraArgs merged, probes and annotations) for every
// testdata/staticpods case without starting a process (package golden:
// kwok's input/output files).
func TestStaticPodsGolden(t *testing.T) {
	golden.Run(t, "staticpods", 3, func(t *testing.T, c *staticPodsCase) []byte {
		host, err := netip.ParseAddr(c.Host)
		if err != nil {
			t.Fatal(err)
		}
		cp := &ControlPlane{cfg: Config{NodeName: c.NodeName, Host: host}, cluster: &c.Cluster, initialCluster: c.InitialCluster, Root: "/vm/root"}
		if c.Egress {
			cp.egress = &egress.Server{}
		}
		var docs []string
		for _, comp := range cp.components() {
			b, err := yaml.Marshal(comp.pod(cp.cfg, cp))
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(b))
		}
		return []byte(strings.Join(docs, "---\n"))
	})
}
