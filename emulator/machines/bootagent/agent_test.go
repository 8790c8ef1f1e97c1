package bootagent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/machines/bootagent"
	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// boot runs the agent of an OS on files and lines; kubeadm succeeds when
// its configuration is on the disk, as kubeadm reads it from there.
func boot(t *testing.T, windows bool, files []bootdata.File, lines []string) (bootagent.Result, string, vmdisk.Disk) {
	t.Helper()
	disk := vmdisk.Disk{Root: t.TempDir(), Windows: windows}
	a := &bootagent.Agent{Windows: windows, Disk: disk, Logs: vmdisk.NewLogs(disk), Kubeadm: func(_ context.Context, args []string, out func(string)) int {
		p, _ := disk.HostPath(bootdata.JoinConfigPath)
		if _, err := os.Stat(p); err != nil {
			out("unable to read config from " + bootdata.JoinConfigPath)
			return 1
		}
		out("kubeadm " + strings.Join(args, " "))
		return 0
	}}
	for i := range files {
		files[i].Raw = string(files[i].Content)
	}
	res := a.Run(context.Background(), &bootdata.BootData{Files: files, RunCmd: lines})
	p, _ := disk.HostPath(vmdisk.LogPath(windows, vmdisk.Boot))
	log, _ := os.ReadFile(p)
	return res, string(log), disk
}

const join = "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml && echo success > /run/cluster-api/bootstrap-success.complete"

func capiFiles(user ...bootdata.File) []bootdata.File {
	return append(user, bootdata.File{Path: bootdata.JoinConfigPath, Content: []byte("kind: JoinConfiguration")},
		bootdata.File{Path: "/run/cluster-api/placeholder", Content: []byte("x")})
}

func sentinel(t *testing.T, d vmdisk.Disk) bool {
	p, _ := d.HostPath("/run/cluster-api/bootstrap-success.complete")
	_, err := os.Stat(filepath.Clean(p))
	return err == nil
}

// TestAFailingLineDoesNotStopTheScript: both agents run the next line
// after a failing one; only an exit ends the script before kubeadm.
func TestAFailingLineDoesNotStopTheScript(t *testing.T) {
	for _, windows := range []bool{false, true} {
		missing := "bash /opt/prepare.sh"
		want := "bash: /opt/prepare.sh: No such file or directory"
		if windows {
			missing, want = "powershell C:/prepare.ps1", "The term 'C:/prepare.ps1' is not recognized"
		}
		res, log, disk := boot(t, windows, capiFiles(), []string{missing, join, "nssm set kubelet start SERVICE_AUTO_START"})
		if !res.KubeadmRan || !sentinel(t, disk) || res.ExitStatus != 0 || !strings.Contains(log, want) || !strings.Contains(log, "not simulated") {
			t.Errorf("windows=%v: %+v, sentinel %v\n%s", windows, res, sentinel(t, disk), log)
		}
		res, log, disk = boot(t, windows, capiFiles(), []string{missing + " || exit 1", join})
		if res.KubeadmRan || sentinel(t, disk) || res.ExitStatus != 1 {
			t.Errorf("windows=%v: an exit after the failure went on: %+v\n%s", windows, res, log)
		}
		if windows && !strings.Contains(log, "User_data script ended with return code: 1") {
			t.Errorf("cloudbase-init's return code line is missing:\n%s", log)
		}
		if !windows && !strings.Contains(log, "cc_scripts_user.py[WARNING]: Failed to run module scripts_user (scripts in /var/lib/cloud/instance/scripts)") {
			t.Errorf("cloud-init's scripts_user warning is missing:\n%s", log)
		}
	}
}

// TestAFileThatDoesNotDecode: cloud-init's write_files stops at it, so
// Cluster API's kubeadm configuration after it is never written and
// kubeadm fails; cloudbase-init writes it undecoded and goes on.
func TestAFileThatDoesNotDecode(t *testing.T) {
	bad := bootdata.File{Path: "/etc/kubernetes/extra.conf", Encoding: "b64", Content: []byte("abcde")}
	res, log, disk := boot(t, false, capiFiles(bad), []string{join})
	if res.ExitStatus != 1 || sentinel(t, disk) || !strings.Contains(log, "log_util.py[WARNING]: Running module write_files") || !strings.Contains(log, "unable to read config") {
		t.Errorf("cloud-init: %+v\n%s", res, log)
	}
	bad.Path = "C:/k/extra.conf"
	res, log, disk = boot(t, true, capiFiles(bad), []string{join})
	p, _ := disk.HostPath("C:/k/extra.conf")
	written, _ := os.ReadFile(p)
	if res.ExitStatus != 0 || string(written) != "abcde" || !strings.Contains(log, "ERROR cloudbaseinit.plugins.common.userdataplugins.cloudconfigplugins.write_files [-] Fail to decode base64 content.") {
		t.Errorf("cloudbase-init: %+v, wrote %q\n%s", res, written, log)
	}
}
