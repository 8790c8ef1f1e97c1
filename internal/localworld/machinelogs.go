package localworld

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// MachineLog is where a state directory holds what one machine did: the
// machine runtime's events for it (written to the machine's boot log, as
// cloud-init or cloudbase-init would) and its kubelet's log. A path is ""
// when the machine never wrote that log.
type MachineLog struct {
	// Machine is the machine's folder under the state directory's
	// machines/ (its resource group and VM name).
	Machine string
	Events  string
	Kubelet string
}

// MachineLogs lists the logs of every machine whose disk is in stateDir,
// by folder name (os.ReadDir's order), for someone looking at a world that did not come up
// (a kept bench directory, a stopped 'winkube up').
func MachineLogs(stateDir string) []MachineLog {
	root := filepath.Join(stateDir, "machines")
	entries, _ := os.ReadDir(root)
	var out []MachineLog
	for _, e := range entries {
		// The runtime's own folders (.managed-disks) are no machine's.
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		ml := MachineLog{Machine: e.Name()}
		for _, windows := range []bool{true, false} {
			disk := vmdisk.Disk{Root: filepath.Join(root, e.Name(), "root"), Windows: windows}
			events, kubelet := existing(disk, vmdisk.Boot), existing(disk, vmdisk.Kubelet)
			if events != "" || kubelet != "" {
				ml.Events, ml.Kubelet = events, kubelet
				break
			}
		}
		out = append(out, ml)
	}
	return out
}

// existing is the host path of a service's log on the disk, or "" when
// the machine has not written it.
func existing(d vmdisk.Disk, service string) string {
	p, err := d.HostPath(vmdisk.LogPath(d.Windows, service))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}
