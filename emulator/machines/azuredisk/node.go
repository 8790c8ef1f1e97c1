package azuredisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

const (
	// defaultVolumeLimit is the driver's limit for a size missing from its
	// table (pkg/azuredisk/azuredisk.go defaultAzureVolumeLimit).
	defaultVolumeLimit = 16
)

// maxDataDisks is the driver's own table of data disks per VM size
// (pkg/azuredisk/azure_dd_max_disk_count.go, e1284a5c), for the sizes the
// emulator offers: the node plugin reports it to the scheduler as the
// node's CSI volume limit. It is the driver's, not Azure's: a size it does
// not list gets defaultVolumeLimit whatever Azure allows.
var maxDataDisks = map[string]int64{
	"STANDARD_B1S": 2, "STANDARD_B2S": 4, "STANDARD_B2MS": 4,
	"STANDARD_D2S_V3": 4, "STANDARD_D4S_V3": 8, "STANDARD_D8S_V3": 16,
	"STANDARD_D2_V3": 4, "STANDARD_D4_V3": 8,
	"STANDARD_D2S_V5": 4, "STANDARD_D4S_V5": 8, "STANDARD_D8S_V5": 16,
	"STANDARD_DS2_V2": 8, "STANDARD_F2S_V2": 4, "STANDARD_E4S_V3": 8, "STANDARD_A2_V2": 4,
}

// NodeConfig is the machine a node plugin runs on.
type NodeConfig struct {
	NodeName string
	Windows  bool
	// VMSize, Location and Zone are the VM's, as the driver reads them
	// from the instance metadata; Zone is "" for a VM without one.
	VMSize, Location, Zone string
	// Disk is the machine's filesystem, where staging and target paths
	// are.
	Disk vmdisk.Disk
	// DataDisks are the disks Azure has attached to the VM, by LUN: what
	// the guest sees on its SCSI controller.
	DataDisks func() []arm.DataDisk
	// Store is the host folder holding the managed disks' contents, one
	// folder per disk's unique ID.
	Store string
	// Log writes to the node's containerd log as the plugin's container.
	Log func(format string, args ...any)
}

// NodePlugin is the driver's node service on one machine.
type NodePlugin struct{ cfg NodeConfig }

var _ kubelet.CSIPlugin = (*NodePlugin)(nil)

// NewNodePlugin returns the node service of the driver on a machine.
func NewNodePlugin(cfg NodeConfig) *NodePlugin {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	return &NodePlugin{cfg: cfg}
}

// NodeGetInfo is the driver's (nodeserver.go NodeGetInfo): the node name
// as node ID, the zone segment ("" unless the VM is in an availability
// zone, whose value is <location>-<zone>), and the size's data disk count
// as the volume limit.
func (n *NodePlugin) NodeGetInfo(context.Context) (kubelet.CSINodeInfo, error) {
	top := map[string]string{TopologyKey: ""}
	if n.cfg.Zone != "" {
		z := strings.ToLower(strings.ReplaceAll(n.cfg.Location, " ", "")) + "-" + n.cfg.Zone
		top[TopologyKey], top[zoneLabel] = z, z
	}
	limit, ok := maxDataDisks[strings.ToUpper(n.cfg.VMSize)]
	if !ok {
		limit = defaultVolumeLimit
	}
	return kubelet.CSINodeInfo{NodeID: n.cfg.NodeName, MaxVolumes: limit, Topology: top}, nil
}

// NodeStageVolume finds the disk Azure attached at the publish context's
// LUN, formats it if it is raw (NTFS on Windows, ext4 on Linux) and mounts
// it at the staging path (nodeserver.go NodeStageVolume; on Windows the
// volume gets the staging folder as an access path).
func (n *NodePlugin) NodeStageVolume(_ context.Context, volumeID string, publish map[string]string, staging string) error {
	if volumeID == "" {
		return grpcError("InvalidArgument", "Volume ID not provided")
	}
	lun, ok := publish["LUN"]
	if !ok || lun == "" {
		return grpcError("InvalidArgument", "lun not provided")
	}
	d, found := n.diskAt(lun)
	if !found {
		// The driver rescans and polls the disks for two minutes before
		// it says this; here the disks are read once and the kubelet
		// retries.
		return grpcError("Internal", fmt.Sprintf("failed to find disk on lun %s. azureDisk - findDiskByLun(%s) failed within timeout", lun, lun))
	}
	content, err := n.content(d)
	if err != nil {
		return grpcError("Internal", fmt.Sprintf("could not format %q(lun: %q), and mount it at %q, failed with %v", d.Name, lun, staging, err))
	}
	n.cfg.Log("NodeStageVolume: formatting %s and mounting at %s with mount options([])", volumeID, staging)
	if err := n.link(staging, content); err != nil {
		return grpcError("Internal", fmt.Sprintf("could not format %q(lun: %q), and mount it at %q, failed with %v", d.Name, lun, staging, err))
	}
	n.cfg.Log("NodeStageVolume: format %s and mounting at %s successfully.", volumeID, staging)
	return nil
}

// NodePublishVolume links the pod's target path to the staged volume: a
// symbolic link on Windows (nodeserver_windows.go, the HostProcess
// mounter's os.Symlink), a bind mount on Linux.
func (n *NodePlugin) NodePublishVolume(_ context.Context, volumeID, staging, target string, _ bool) error {
	src, err := n.cfg.Disk.HostPath(staging)
	if err != nil {
		return grpcError("Internal", fmt.Sprintf("could not mount %q at %q: %v", staging, target, err))
	}
	if _, err := os.Stat(src); err != nil {
		return grpcError("FailedPrecondition", fmt.Sprintf("volume %s is not staged at %s", volumeID, staging))
	}
	n.cfg.Log("NodePublishVolume: mounting %s at %s", staging, target)
	if err := n.link(target, src); err != nil {
		return grpcError("Internal", fmt.Sprintf("could not mount %q at %q: %v", staging, target, err))
	}
	n.cfg.Log("NodePublishVolume: mount %s at %s successfully", staging, target)
	return nil
}

// NodeUnpublishVolume removes the pod's link.
func (n *NodePlugin) NodeUnpublishVolume(_ context.Context, _, target string) error {
	if err := n.unlink(target); err != nil {
		return grpcError("Internal", fmt.Sprintf("failed to unmount target %q: %v", target, err))
	}
	return nil
}

// NodeUnstageVolume removes the volume's staging mount; the disk's
// contents stay with the disk.
func (n *NodePlugin) NodeUnstageVolume(_ context.Context, _, staging string) error {
	if err := n.unlink(staging); err != nil {
		return grpcError("Internal", fmt.Sprintf("failed to unmount staging target %q: %v", staging, err))
	}
	return nil
}

// diskAt is the data disk the VM has at a LUN.
func (n *NodePlugin) diskAt(lun string) (arm.DataDisk, bool) {
	want, err := strconv.Atoi(lun)
	if err != nil || n.cfg.DataDisks == nil {
		return arm.DataDisk{}, false
	}
	for _, d := range n.cfg.DataDisks() {
		if d.LUN == want {
			return d, true
		}
	}
	return arm.DataDisk{}, false
}

// content is the disk's contents, formatted the first time a node stages
// it (a new managed disk is raw).
func (n *NodePlugin) content(d arm.DataDisk) (string, error) {
	if d.UniqueID == "" || n.cfg.Store == "" {
		return "", errors.New("the disk has no contents on this host")
	}
	dir := filepath.Join(n.cfg.Store, d.UniqueID)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	fs := "ext4"
	if n.cfg.Windows {
		fs = "NTFS"
	}
	n.cfg.Log("formatting disk %s (lun %d, %d GiB) as %s", d.Name, d.LUN, d.SizeGB, fs)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if !n.cfg.Windows {
		// mkfs.ext4 leaves lost+found on a new filesystem.
		if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// link makes the machine path p stand for host folder to, replacing the
// empty folder the kubelet may have made there.
func (n *NodePlugin) link(p, to string) error {
	hp, err := n.cfg.Disk.HostPath(p)
	if err != nil {
		return err
	}
	if cur, err := os.Readlink(hp); err == nil {
		if cur == to {
			return nil
		}
		if err := os.Remove(hp); err != nil {
			return err
		}
	} else if err := os.Remove(hp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		return err
	}
	return os.Symlink(to, hp)
}

// unlink removes a link made by link; a path that is gone is unmounted.
func (n *NodePlugin) unlink(p string) error {
	hp, err := n.cfg.Disk.HostPath(p)
	if err != nil {
		return err
	}
	if err := os.Remove(hp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// grpcError is a gRPC status as its Error() reads, which the kubelet
// passes on in its events.
func grpcError(code, desc string) error {
	return fmt.Errorf("rpc error: code = %s desc = %s", code, desc)
}
