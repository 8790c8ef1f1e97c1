package containerruntime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// TestCNIAddLoadsCalicosNetConfAsThePluginDoes: the calico entry of the
// node's conflist is decoded with the plugin's field types at every ADD,
// so a template that quotes its MTU token (install-cni writes "1350" as
// given) fails every sandbox, as on a node; the bare token works.
func TestCNIAddLoadsCalicosNetConfAsThePluginDoes(t *testing.T) {
	for _, c := range []struct {
		name, mtu, wantErr string
	}{
		{"bare number", `1350`, ""},
		{"quoted number", `"1350"`, `failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int`},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			node := Node{Name: "n", OS: "linux", Disk: vmdisk.Disk{Root: root}}
			dir := filepath.Join(root, "etc/cni/net.d")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			conf := `{"name":"k8s-pod-network","cniVersion":"0.3.1","plugins":[{"type":"calico","nodename_file_optional":true,"mtu":` + c.mtu + `,"ipam":{"type":"calico-ipam"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
			if err := os.WriteFile(filepath.Join(dir, "10-calico.conflist"), []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			err := CNIAdd(node, "/etc/cni/net.d")
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("CNI ADD: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("CNI ADD: %v, want an error containing %q", err, c.wantErr)
			}
		})
	}
}
