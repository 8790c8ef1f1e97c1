package machines

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/vmagent"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/machines/vmshell"
)

// The runtime is the VM agent of its machines: Run Command needs only the
// agent, not the node, so a machine whose boot failed before it joined
// answers as well as a node does.
var _ arm.GuestAgent = (*Runtime)(nil)

// RunCommand runs a script on a running machine as the VM agent does.
func (r *Runtime) RunCommand(ctx context.Context, id string, c arm.Command) (arm.CommandResult, error) {
	r.mu.Lock()
	m, ok := r.machines[key(id)]
	r.mu.Unlock()
	if !ok {
		return arm.CommandResult{}, fmt.Errorf("machine %s is not running in this machine runtime", id)
	}
	want := arm.ShellSh
	user := vmagent.LinuxUser
	if m.windows() {
		want, user = arm.ShellPowerShell, vmagent.WindowsUser
	}
	if c.Shell != want {
		return arm.CommandResult{}, fmt.Errorf("the VM agent of %s runs %s scripts, not %s", m.arm.Name, want, c.Shell)
	}
	sh := &vmshell.Machine{Hostname: m.hostname(), Disk: m.disk(user), KubeletVersion: r.kubeletVersion(m), HNS: r.hns(m), Dial: r.nodeDial(m)}
	res := vmagent.Run(ctx, sh, c.Script, c.Parameters)
	return arm.CommandResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, nil
}

// SerialConsole reads a machine's serial console from its disk, also while
// it is switched off: boot diagnostics keep the log of a stopped VM.
func (r *Runtime) SerialConsole(_ context.Context, id string) ([]byte, error) {
	r.mu.Lock()
	var disks []vmdisk.Disk
	if m, ok := r.machines[key(id)]; ok {
		disks = []vmdisk.Disk{m.disk("")}
	} else if dir, ok := r.halted[key(id)]; ok {
		// A halted machine is known by its disk alone: it holds the log
		// of one boot agent, cloudbase-init's or cloud-init's.
		root := filepath.Join(dir, "root")
		disks = []vmdisk.Disk{{Root: root, Windows: true}, {Root: root}}
	}
	r.mu.Unlock()
	if disks == nil {
		return nil, fmt.Errorf("machine %s has no disk in this machine runtime", id)
	}
	for _, d := range disks {
		if log, err := vmagent.SerialConsole(d); err != nil || log != nil {
			return log, err
		}
	}
	return nil, nil
}
