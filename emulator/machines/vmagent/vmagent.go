// Package vmagent is what the Azure VM agent does inside an emulated
// machine for the emulator: it runs a Run Command script through the
// machine's simulated shell (vmshell, which answers only what it can
// answer truthfully), and reads what the machine wrote to its serial
// console.
package vmagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/machines/vmshell"
)

// The users the agent runs scripts as: "Scripts run as System on Windows"
// and "by default as an elevated user on Linux" (MicrosoftDocs/
// azure-compute-docs articles/virtual-machines/windows/run-command.md
// @d415f173, linux/run-command.md @1a043fb3).
const (
	WindowsUser = vmdisk.SystemUser
	LinuxUser   = vmdisk.RootUser
)

// Result is what a script left.
type Result struct {
	Stdout, Stderr string
	ExitCode       int
}

// Run runs a script line by line, as a shell runs a script without
// errexit: a failed line does not stop the ones after it, `exit N` does,
// and the script's exit code is its last line's. Blank lines and comments
// (# in both PowerShell and sh) are skipped. Parameters are refused: the
// simulated shell has no variables to bind them to.
func Run(ctx context.Context, sh *vmshell.Machine, script []string, parameters [][2]string) Result {
	var out, errb bytes.Buffer
	if len(parameters) > 0 {
		names := make([]string, len(parameters))
		for i, p := range parameters {
			names[i] = p[0]
		}
		fmt.Fprintf(&errb, "winkube: this emulated machine's shell has no variables, so it cannot pass the run command's parameters (%s) to the script: write their values into the script.\n", strings.Join(names, ", "))
		return Result{Stderr: errb.String(), ExitCode: 1}
	}
	status := 0
	for _, line := range script {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if ctx.Err() != nil {
			fmt.Fprintln(&errb, "winkube: the run command's time is up:", ctx.Err())
			return Result{Stdout: out.String(), Stderr: errb.String(), ExitCode: 1}
		}
		if code, ok := exitLine(line); ok {
			return Result{Stdout: out.String(), Stderr: errb.String(), ExitCode: code}
		}
		status = sh.Run(line, &out, &errb)
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), ExitCode: status}
}

// exitLine reads `exit` and `exit N`.
func exitLine(line string) (int, bool) {
	f := strings.Fields(line)
	if len(f) == 0 || !strings.EqualFold(f[0], "exit") || len(f) > 2 {
		return 0, false
	}
	if len(f) == 1 {
		return 0, true
	}
	n, err := strconv.Atoi(f[1])
	return n, err == nil
}

// SerialConsole is what the machine wrote to its serial port: its boot
// agent's log, which both OSes of CAPZ's images send there.
//   - Linux: cloud-init tees its output to /var/log/cloud-init-output.log
//     "so the user can see output there without needing to look on the
//     console" (canonical/cloud-init config/cloud.cfg.d/05_logging.cfg
//     @04eacd06): the console has the same lines.
//   - Windows: CAPZ's images set cloudbase-init's
//     logging_serial_port_settings (kubernetes-sigs/image-builder
//     images/capi/ansible/windows/roles/cloudbase-init/templates/
//     cloudbase-init.conf @ae63061e; COM2 on Azure, the port Azure's VMs
//     have, kubernetes-sigs/image-builder#875), and cloudbase-init formats
//     the port's records as its log file's (cloudbase/cloudbase-init
//     cloudbaseinit/utils/log.py @c48d7596).
//
// The kernel's and the firmware's lines are not there: no kernel runs.
func SerialConsole(d vmdisk.Disk) ([]byte, error) {
	p, err := d.HostPath(vmdisk.LogPath(d.Windows, vmdisk.Boot))
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // nothing written yet
	}
	return b, err
}
