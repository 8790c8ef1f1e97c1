package vmagent

import (
	"context"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/machines/vmshell"
)

func machine(t *testing.T, windows bool) (*vmshell.Machine, *vmdisk.Logs) {
	root := t.TempDir()
	user := LinuxUser
	if windows {
		user = WindowsUser
	}
	d := vmdisk.Disk{Root: root, Windows: windows, User: user}
	return &vmshell.Machine{Hostname: "node-1", Disk: d}, vmdisk.NewLogs(d)
}

func TestAScriptReadsTheBootLogAndRunsOnPastAFailure(t *testing.T) {
	sh, logs := machine(t, true)
	for i := range 60 {
		logs.Write(vmdisk.Boot, "cloudbase-init step %d", i)
	}
	res := Run(context.Background(), sh, []string{
		"# what failed",
		`Get-Content 'C:\Program Files\Cloudbase Solutions\Cloudbase-Init\log\cloudbase-init.log' -Tail 50`,
		"",
		`Get-Content C:\missing.log`,
		"hostname",
	}, nil)
	if lines := strings.Count(res.Stdout, "\n"); lines != 51 || !strings.Contains(res.Stdout, "step 59") || strings.Contains(res.Stdout, "step 9\n") {
		t.Errorf("the log's last 50 lines and the host name: %d lines\n%s", lines, res.Stdout)
	}
	if !strings.Contains(res.Stderr, `Cannot find path 'C:\missing.log'`) {
		t.Errorf("the failed line's error: %q", res.Stderr)
	}
	if res.ExitCode != 0 || !strings.HasSuffix(res.Stdout, "node-1\n") {
		t.Errorf("the script ends with its last line: exit %d, %q", res.ExitCode, res.Stdout)
	}
}

func TestExitCodesAndRefusals(t *testing.T) {
	sh, _ := machine(t, false)
	if res := Run(context.Background(), sh, []string{"cat /nope"}, nil); res.ExitCode != 1 {
		t.Errorf("a script whose last line fails: exit %d", res.ExitCode)
	}
	res := Run(context.Background(), sh, []string{"hostname", "exit 3", "hostname"}, nil)
	if res.ExitCode != 3 || strings.Count(res.Stdout, "node-1") != 1 {
		t.Errorf("exit 3 stops the script: %d %q", res.ExitCode, res.Stdout)
	}
	if res := Run(context.Background(), sh, []string{"systemctl status kubelet"}, nil); res.ExitCode != 127 || !strings.Contains(res.Stderr, "cannot run") {
		t.Errorf("a command the machine cannot answer is refused, not faked: %d %q", res.ExitCode, res.Stderr)
	}
	if res := Run(context.Background(), sh, []string{"cat $1"}, [][2]string{{"path", "/etc/hosts"}}); res.ExitCode == 0 || !strings.Contains(res.Stderr, "path") {
		t.Errorf("parameters are refused, named: %d %q", res.ExitCode, res.Stderr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := Run(ctx, sh, []string{"hostname"}, nil); res.ExitCode == 0 || res.Stdout != "" {
		t.Errorf("a script whose time is up runs nothing more: %d %q", res.ExitCode, res.Stdout)
	}
}

func TestTheAgentRunsAsRootInRootsHome(t *testing.T) {
	sh, logs := machine(t, false)
	logs.Write(vmdisk.Boot, "cloud-init says hello")
	res := Run(context.Background(), sh, []string{"cat /var/log/cloud-init-output.log"}, nil)
	if !strings.Contains(res.Stdout, "cloud-init says hello") || res.Stderr != "" {
		t.Errorf("root reads cloud-init's output: %q %q", res.Stdout, res.Stderr)
	}
	if sh.Disk.Home() != "/root" {
		t.Errorf("root's home: %s", sh.Disk.Home())
	}
}

func TestTheSerialConsoleIsTheBootAgentsLog(t *testing.T) {
	for _, windows := range []bool{true, false} {
		sh, logs := machine(t, windows)
		if b, err := SerialConsole(sh.Disk); err != nil || b != nil {
			t.Errorf("windows=%t: before the boot agent wrote anything: %q %v", windows, b, err)
		}
		logs.Write(vmdisk.Boot, "boot failed: no kubeadm join")
		b, err := SerialConsole(sh.Disk)
		if err != nil || !strings.Contains(string(b), "boot failed: no kubeadm join") {
			t.Errorf("windows=%t: %q %v", windows, b, err)
		}
	}
}
