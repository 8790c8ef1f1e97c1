package nodejoin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

func plan(win infrav1.WindowsServerVersion, k8s, ctr string) Plan {
	return Plan{NodeName: "byo-win-1", WindowsVersion: win, KubernetesVersion: k8s, ContainerdVersion: ctr, PauseImage: PauseImage(win),
		APIServer: "10.0.0.4:6443", Token: "abcdef.0123456789abcdef", CAHash: "sha256:00", CNI: "calico", CloudTaint: true}
}

// The script fixes the traps of sig-windows-tools' scripts it replaces.
func TestScriptAvoidsUpstreamTraps(t *testing.T) {
	s, err := Script(plan(infrav1.WindowsServer2025, "v1.34.2", "2.1.4"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// containerd at the plan's version, checked against its checksum.
		"releases/download/v2.1.4/$tgz.sha256sum", "Get-FileHash -Algorithm SHA256",
		// kubelet and kubeadm at the cluster's version, checked too.
		"https://dl.k8s.io/v1.34.2/bin/windows/amd64/$bin.sha256",
		// Windows Server 2025's sandbox needs pause 3.10.2, in containerd 2's config.
		"sandbox = 'registry.k8s.io/pause:3.10.2'", "version = 3", "bin_dirs = ['c:/opt/cni/bin']",
		// CAPZ's Windows template's exclusions and kubelet arguments.
		"Add-MpPreference -ExclusionProcess 'C:/opt/cni/bin/calico.exe'", "--windows-priorityclass=ABOVE_NORMAL_PRIORITY_CLASS",
		"--register-with-taints=node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule",
		"-LocalPort 10250", "nssm set kubelet DependOnService containerd",
		"--cri-socket 'npipe:////./pipe/containerd-containerd'", "foreach ($feature in 'Containers', 'Hyper-V-PowerShell')",
		// The Hyper-V role as CAPZ's images have it, without the processor
		// check of Install-WindowsFeature Hyper-V.
		"/Enable-Feature /FeatureName:Microsoft-Hyper-V /All /NoRestart",
		"if ($build -ne 26100)", "-Port 6443",
	} {
		if !strings.Contains(strings.ReplaceAll(s, "& $nssm", "nssm"), want) {
			t.Errorf("script lacks %q", want)
		}
	}
	for _, bad := range []string{"pod-infra-container-image", "-Name Hyper-V ", "'Hyper-V'", "<no value>", "1.7.1"} {
		if strings.Contains(code(s), bad) {
			t.Errorf("script contains %q", bad)
		}
	}

	s, err = Script(plan(infrav1.WindowsServer2022, "v1.33.5", "1.7.25"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sandbox_image = 'registry.k8s.io/pause:3.10'", "version = 2", "bin_dir = 'c:/opt/cni/bin'", "if ($build -ne 20348)"} {
		if !strings.Contains(s, want) {
			t.Errorf("containerd 1.7 script lacks %q", want)
		}
	}
}

// Every step announces itself, so the transcript's last step line names
// where a failed join stopped.
func TestScriptStepsInOrder(t *testing.T) {
	s, err := Script(plan(infrav1.WindowsServer2022, "v1.34.2", "1.7.25"))
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for _, step := range Steps {
		i := strings.Index(s, StepPrefix+step+"'")
		if i < 0 || i < last {
			t.Fatalf("step %s missing or out of order", step)
		}
		last = i
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{WindowsVersion: "2022"},
		{Node: "w", WindowsVersion: "2016"},
		{Node: "w", WindowsVersion: "2022", ContainerdVersion: "v1.7.25"},
		{Node: "w", WindowsVersion: "2022", APIServer: "10.0.0.4"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v validated", o)
		}
	}
	if err := (&Options{Node: "w", WindowsVersion: "2025", ContainerdVersion: "2.1.4", APIServer: "10.0.0.4:6443"}).Validate(); err != nil {
		t.Error(err)
	}
}

// code is the script without its comment lines.
func code(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// The emulator's shell is tested with the script this package renders:
// its copy must be the template's output (regenerate it with
// Script(testdataPlan) and LeaveScript() when the template
// changes).
func TestShellTestdataIsTheScript(t *testing.T) {
	s, err := Script(testdataPlan)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"join.ps1": s, "leave.ps1": LeaveScript()} {
		got, err := os.ReadFile(filepath.Join("..", "..", "emulator", "machines", "vmshell", "testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("emulator/machines/vmshell/testdata/%s is not what the template renders: regenerate it", file)
		}
	}
}

// testdataPlan is the plan of the join script the emulator's shell is
// tested with (emulator/machines/vmshell/testdata/join.ps1, which
// TestShellTestdataIsTheScript keeps in step with the template).
var testdataPlan = Plan{
	NodeName: "byo-win-1", WindowsVersion: infrav1.WindowsServer2022, KubernetesVersion: "v1.36.3", ContainerdVersion: "1.7.25",
	PauseImage: "registry.k8s.io/pause:3.10", APIServer: "127.0.0.9:6443", Token: "abcdef.0123456789abcdef",
	TokenExpires: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
	CAHash:       "sha256:0000000000000000000000000000000000000000000000000000000000000000", CNI: "calico", CloudTaint: true,
}
