package machines

import (
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/azuredisk"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

// The Azure Disk CSI driver's images, by repository: the plugin (its
// controller and node services; the Windows HostProcess build is the same
// repository with a -windows-hp tag) and the sidecar that registers the
// node service with the kubelet (charts/v1.34.5/azuredisk-csi-driver
// values.yaml, azuredisk-csi-driver fb4981e3).
const (
	azureDiskRepository   = "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi"
	registrarRepository   = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-node-driver-registrar"
	provisionerRepository = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-provisioner"
	attacherRepository    = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-attacher"
)

// azureDiskRole tells the controller pod's containers apart by their
// images: the sidecars do the provisioning and attaching.
func azureDiskRole(c corev1.Container) string {
	switch registry.Repository(c.Image) {
	case azureDiskRepository:
		return azuredisk.RoleDriver
	case provisionerRepository:
		return azuredisk.RoleProvisioner
	case attacherRepository:
		return azuredisk.RoleAttacher
	}
	return ""
}

// managedDisks is the host folder holding the contents of the managed
// disks the machines' node plugins formatted: a disk's data is Azure's,
// not a machine's, so it outlives the machines it was attached to.
func (r *Runtime) managedDisks() string { return filepath.Join(r.opts.Dir, ".managed-disks") }

// csiPlugins is what the machine's kubelet registers when a pod's
// containers first run: the Azure Disk driver's node service, for a pod
// that runs the plugin as a node service (it is given --nodeid, which the
// controller's is not) beside node-driver-registrar, whose registration
// socket is what the kubelet's plugin watcher finds.
func (r *Runtime) csiPlugins(m *machine) func(pod *corev1.Pod) (string, kubelet.CSIPlugin) {
	return func(pod *corev1.Pod) (string, kubelet.CSIPlugin) {
		var plugin *corev1.Container
		registrar := false
		for i, c := range pod.Spec.Containers {
			switch registry.Repository(c.Image) {
			case azureDiskRepository:
				if _, ok := argValue(c, "--nodeid"); ok {
					plugin = &pod.Spec.Containers[i]
				}
			case registrarRepository:
				registrar = true
			}
		}
		if plugin == nil || !registrar {
			return "", nil
		}
		driver := azuredisk.DriverName
		if v, ok := argValue(*plugin, "--drivername"); ok && v != "" {
			driver = v
		}
		am := m.arm
		who := pod.Namespace + "/" + pod.Name + " " + plugin.Name
		return driver, azuredisk.NewNodePlugin(azuredisk.NodeConfig{
			NodeName: m.nodeName, Windows: m.windows(), VMSize: am.VMSize, Location: am.Location, Zone: am.Zone,
			Disk: m.disk(""), DataDisks: am.DataDisks, Store: r.managedDisks(),
			Log: func(format string, args ...any) {
				m.logs.Write(vmdisk.Containerd, "%s: %s", who, fmt.Sprintf(format, args...))
			},
		})
	}
}

// argValue is a --name=value or --name value argument of the container's
// command line.
func argValue(c corev1.Container, name string) (string, bool) {
	args := append(append([]string(nil), c.Command...), c.Args...)
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}
