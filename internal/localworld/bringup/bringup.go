// Package bringup is what a local world's bring-up leaves for whoever
// measures or examines it: when each step happened (Timeline, read from the
// API objects by localworld) and where each machine's logs are in a state
// directory (MachineLogs). It imports no world, so the benchmark's report
// and its tests do not link one.
package bringup

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// Timeline is when the world's cluster reached each step of its bring-up,
// read from the API objects' own timestamps (which have whole seconds).
type Timeline struct {
	// CNIApplied is when Cluster API's ClusterResourceSet had applied the
	// CNI's DaemonSets to the workload cluster.
	CNIApplied time.Time
	// ControlPlaneProvisioned is when the first control-plane VM was
	// provisioned: its API server starts then.
	ControlPlaneProvisioned time.Time
	// FirstControlPlaneReady is when the first control-plane node became Ready.
	FirstControlPlaneReady time.Time
	// FirstControlPlane is the first control-plane machine's way to an
	// initialized control plane.
	FirstControlPlane ControlPlaneTimes
	// NodesReady are the times the nodes became Ready, in order.
	NodesReady []time.Time
	Workers    []WorkerTimes
}

// ControlPlaneTimes are the first control plane's steps: its Machine
// created by KubeadmControlPlane; its VM handed to the machine runtime
// (booting); its Node registered, once its API server answered and
// kubeadm init ran; and Cluster API's ControlPlaneInitialized on the
// Cluster, once Cluster API reached that API server through the load
// balancer, which the workers' bootstrap data waits for.
type ControlPlaneTimes struct {
	Created, VMBooting, NodeRegistered, Initialized time.Time
}

// WorkerTimes are one worker machine's steps: its Machine created, its
// infrastructure (the VM) provisioned, its Node registered, its Node Ready.
type WorkerTimes struct {
	Machine string
	// BootstrapReady is when its bootstrap data (the kubeadm join
	// configuration) was ready: workers wait for the control plane here.
	// VMBooting is when the emulator handed the provisioned VM to the
	// machine runtime; Provisioned when Cluster API saw the infrastructure
	// ready.
	Created, BootstrapReady, VMBooting, Provisioned, NodeRegistered, NodeReady time.Time
	// CNIPodCreated, CNIPodScheduled and CNIPodReady follow the CNI's
	// DaemonSet pod on the node: created by the DaemonSet controller,
	// bound by the scheduler, run Ready by the kubelet (the first of them
	// when the CNI has several DaemonSets for the node's OS).
	CNIPodCreated, CNIPodScheduled, CNIPodReady time.Time
}

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
