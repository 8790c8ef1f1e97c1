// Package bootagent is the simulated cloud-init (Linux) and cloudbase-init
// (Windows): it runs a machine's boot data in their order — write_files,
// then runcmd as one script — with the semantics each has when a step
// fails, and writes the lines each writes to the logs a log collector
// reads.
//
// Sources, pinned:
//   - cloud-init, canonical/cloud-init@04eacd06ee60de9dbb9e7be784be20dab7342c1a:
//     cloudinit/config/cc_write_files.py, cc_runcmd.py, cc_scripts_user.py,
//     cloudinit/util.py (shellify), cloudinit/subp.py (runparts),
//     cloudinit/config/modules.py, cloudinit/log/log_util.py (logexc),
//     config/cloud.cfg.d/05_logging.cfg (formats), config/cloud.cfg.tmpl
//     (write_files runs in the init stage, runcmd in config, scripts_user in
//     final).
//   - cloudbase-init, cloudbase/cloudbase-init@c48d7596bf5e176c72c01fc70d2006d4b84cb573:
//     cloudbaseinit/plugins/common/userdataplugins/cloudconfig.py,
//     cloudconfigplugins/factory.py (write_files before runcmd),
//     cloudconfigplugins/write_files.py, cloudconfigplugins/runcmd.py,
//     cloudbaseinit/plugins/common/userdatautils.py and execcmd.py
//     (runcmd is one "rem cmd" script run by cmd.exe),
//     cloudbaseinit/osutils/windows.py (get_default_script_exec_header).
//
// What a command does is simulated only where the machine's state tells
// it (see command.go); a command with no knowable effect is logged as not
// simulated and succeeds, so that real templates boot.
package bootagent

import (
	"context"
	"fmt"

	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// Kubeadm runs a kubeadm command line of the boot data: args are its
// arguments after "kubeadm"; what kubeadm prints goes to out, one line a
// call. It returns kubeadm's exit status.
type Kubeadm func(ctx context.Context, args []string, out func(line string)) int

// Agent boots one machine.
type Agent struct {
	Windows bool
	Disk    vmdisk.Disk
	Logs    *vmdisk.Logs
	Kubeadm Kubeadm
}

// Result is how the boot data's steps went.
type Result struct {
	// ExitStatus is the runcmd script's, as the agent saw it: the last
	// command's, or an exit's.
	ExitStatus int
	// KubeadmRan is set when the script reached its kubeadm command.
	KubeadmRan bool
}

// Run writes the files and runs the commands of b.
func (a *Agent) Run(ctx context.Context, b *bootdata.BootData) Result {
	a.writeFiles(b.Files)
	return a.runcmd(ctx, b.RunCmd)
}

// cloud-init's console handler writes WARNING and above to stderr, which
// cloud-init-output.log collects: "%(filename)s[%(levelname)s]: %(message)s"
// after the time (05_logging.cfg). Its DEBUG lines go to cloud-init.log.
func (a *Agent) cloudInit(file, level, format string, args ...any) {
	line := fmt.Sprintf("%s[%s]: %s", file, level, fmt.Sprintf(format, args...))
	if level != "DEBUG" {
		a.Logs.Write(vmdisk.Boot, "%s", line)
	}
	a.Logs.Write(cloudInitLog, "%s", line)
}

// cloudInitLog is the service whose log is /var/log/cloud-init.log.
const cloudInitLog = "cloud-init"

// cloudbase-init logs through oslo.log: "<pid> <LEVEL> <logger> [-] <message>"
// after the time (oslo.log's logging_default_format_string).
func (a *Agent) cloudbaseInit(logger, level, format string, args ...any) {
	a.Logs.Write(vmdisk.Boot, "%d %s cloudbaseinit.%s [-] %s", cloudbaseInitPID, level, logger, fmt.Sprintf(format, args...))
}

// cloudbaseInitPID stands for the cloudbase-init service's process.
const cloudbaseInitPID = 1412

// output is a line a command printed, as the log shows it.
func (a *Agent) output(line string) { a.Logs.Write(vmdisk.Boot, "%s", line) }
