package bootagent

import (
	"context"
)

// The runcmd script cloud-init writes (cc_runcmd.py, util.shellify): a
// "#!/bin/sh" header and the lines, no "set -e"; cloud-init runs it in
// its final stage (scripts_user, subp.runparts).
const runcmdScript = "/var/lib/cloud/instance/scripts/runcmd"

const scriptsUserModule = "<module 'cloudinit.config.cc_scripts_user' from '/usr/lib/python3/dist-packages/cloudinit/config/cc_scripts_user.py'>"

// runcmd runs the commands as the one script both agents make of them
// (cloud-init: /bin/sh; cloudbase-init: a "rem cmd" script run by
// cmd.exe): a failing line does not stop the script — the next line
// runs — and the script's status is its last command's, unless a line
// exits. Cluster API chains its kubeadm command and the sentinel file
// with "&&", so a failed kubeadm skips only the sentinel.
func (a *Agent) runcmd(ctx context.Context, lines []string) Result {
	const logger = "plugins.common.userdataplugins.cloudconfigplugins.runcmd"
	if a.Windows {
		if len(lines) == 0 {
			a.cloudbaseInit(logger, "INFO", "No cloud-config runcmd entries found.")
			return Result{}
		}
		a.cloudbaseInit(logger, "INFO", "Running cloud-config runcmd entries.")
		a.cloudbaseInit(logger, "INFO", "Found %d cloud-config runcmd entries.", len(lines))
	}
	sh := &shell{agent: a}
	for i, line := range lines {
		if ctx.Err() != nil {
			break
		}
		sh.line = i + 2 // after the script's header line
		if exited := sh.run(ctx, line); exited {
			break
		}
	}
	res := Result{ExitStatus: sh.status, KubeadmRan: sh.kubeadmRan}
	if a.Windows {
		a.cloudbaseInit("plugins.common.userdatautils", "INFO", "User_data script ended with return code: %d", sh.status)
		return res
	}
	if sh.status != 0 {
		// runparts raises after the failed script; scripts_user warns and
		// re-raises; the module runner logs the module as failed.
		a.cloudInit("subp.py", "DEBUG", "Unexpected error while running command.\nCommand: ['%s']\nExit code: %d", runcmdScript, sh.status)
		a.cloudInit("cc_scripts_user.py", "WARNING", "Failed to run module scripts_user (scripts in /var/lib/cloud/instance/scripts)")
		a.cloudInit("log_util.py", "WARNING", "Running module scripts_user (%s) failed", scriptsUserModule)
	}
	return res
}
