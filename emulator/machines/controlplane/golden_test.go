package controlplane

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/egress"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

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
// testdata/staticpods case without starting a process, in kwok's golden
// style (kubernetes-sigs/kwok kustomize/stage/pod/general/testdata/
// pod-create.input.yaml and .output.yaml, 8ca8488a). `go test -run
// TestStaticPodsGolden -update` rewrites the outputs; review their diff.
func TestStaticPodsGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "staticpods", "*.input.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 3 {
		t.Fatalf("found %d cases in testdata/staticpods; the golden files are missing", len(inputs))
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var c staticPodsCase
			if err := yaml.UnmarshalStrict(raw, &c); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
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
			got := []byte(strings.Join(docs, "---\n"))
			out := strings.TrimSuffix(in, ".input.yaml") + ".output.yaml"
			if *update {
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, out, got, want)
			}
		})
	}
}
