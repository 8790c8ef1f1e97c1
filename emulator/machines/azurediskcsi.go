package machines

import (
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/azuredisk"
	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

// azureDiskRole tells the controller pod's containers apart by their
// images: the sidecars do the provisioning and attaching.
func azureDiskRole(c corev1.Container) string {
	switch registry.Repository(c.Image) {
	case registry.AzureDiskRepository:
		return azuredisk.RoleDriver
	case registry.Repository(registry.CSIProvisionerImage):
		return azuredisk.RoleProvisioner
	case registry.Repository(registry.CSIAttacherImage):
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
			case registry.AzureDiskRepository:
				if _, ok := containerruntime.Arg(c, "--nodeid"); ok {
					plugin = &pod.Spec.Containers[i]
				}
			case registry.Repository(registry.CSINodeDriverRegistrarImage):
				registrar = true
			}
		}
		if plugin == nil || !registrar {
			return "", nil
		}
		driver := azuredisk.DriverName
		if v, ok := containerruntime.Arg(*plugin, "--drivername"); ok && v != "" {
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

// azureDiskProxyCheck is the Windows node plugin starting outside
// HostProcess (the chart's csi-azuredisk-node-win without
// --enable-windows-host-process): it reaches the node's disks through
// csi-proxy's named pipes, which exist only while csi-proxy runs on the
// node, and exits when it cannot open them (azuredisk-csi-driver v1.34.5
// pkg/mounter/safe_mounter_windows.go NewSafeMounter, then klog.Fatalf in
// pkg/azuredisk/azuredisk.go, exit code 255); the log lines are its own.
func azureDiskProxyCheck(windows bool, installed map[string]bool, c corev1.Container) (logs []string, err error) {
	if !windows || registry.Repository(c.Image) != registry.AzureDiskRepository {
		return nil, nil
	}
	if _, node := containerruntime.Arg(c, "--nodeid"); !node {
		return nil, nil
	}
	if v, _ := containerruntime.Arg(c, "--enable-windows-host-process"); v == "true" || installed["csi-proxy"] {
		return nil, nil
	}
	const v1 = `open \\.\pipe\csi-proxy-filesystem-v1: The system cannot find the file specified.`
	const v1beta = `open \\.\pipe\csi-proxy-filesystem-v1beta1: The system cannot find the file specified.`
	return []string{
		"failed to connect to csi-proxy v1 with error: " + v1 + ", will try with v1Beta",
		"failed to connect to csi-proxy v1beta with error: " + v1beta,
	}, &kubelet.Exited{Code: 255, Message: "Failed to get safe mounter. Error: " + v1beta}
}
