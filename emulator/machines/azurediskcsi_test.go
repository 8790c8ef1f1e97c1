package machines_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/registry"
)

// The Azure Disk node plugin outside HostProcess on Windows opens
// csi-proxy's pipes as it starts: it runs once csi-proxy runs on the node,
// and exits as the real one does while it does not. The HostProcess
// plugin, the controller and Linux nodes need no csi-proxy.
func TestAzureDiskNodePluginNeedsCSIProxyOutsideHostProcess(t *testing.T) {
	node := corev1.Container{Name: "azuredisk", Image: registry.AzureDiskImage, Args: []string{"--nodeid=$(KUBE_NODE_NAME)", "--drivername=disk.csi.azure.com"}}
	hp := node
	hp.Image, hp.Args = registry.AzureDiskWindowsImage, append(append([]string(nil), node.Args...), "--enable-windows-host-process=true")
	controller := corev1.Container{Name: "azuredisk", Image: registry.AzureDiskImage, Args: []string{"--drivername=disk.csi.azure.com"}}
	withProxy := map[string]bool{"csi-proxy": true}
	for _, c := range []struct {
		name      string
		windows   bool
		installed map[string]bool
		ctr       corev1.Container
		exits     bool
	}{
		{"windows node plugin without csi-proxy", true, nil, node, true},
		{"windows node plugin with csi-proxy", true, withProxy, node, false},
		{"HostProcess node plugin", true, nil, hp, false},
		{"linux node plugin", false, nil, node, false},
		{"controller", true, nil, controller, false},
	} {
		logs, err := machines.AzureDiskProxyCheck(c.windows, c.installed, c.ctr)
		var ex *kubelet.Exited
		switch {
		case c.exits && (!errors.As(err, &ex) || ex.Code != 255 || ex.Message != `Failed to get safe mounter. Error: open \\.\pipe\csi-proxy-filesystem-v1beta1: The system cannot find the file specified.`):
			t.Errorf("%s: %v, want the driver's exit", c.name, err)
		case c.exits && (len(logs) != 2 || !strings.HasPrefix(logs[0], `failed to connect to csi-proxy v1 with error: open \\.\pipe\csi-proxy-filesystem-v1:`)):
			t.Errorf("%s: logs %q", c.name, logs)
		case !c.exits && (err != nil || len(logs) != 0):
			t.Errorf("%s: %v %q, want a start", c.name, err, logs)
		}
	}
}
