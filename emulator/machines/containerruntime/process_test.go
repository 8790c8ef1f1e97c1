package containerruntime

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// TestCommandLine: the container's command replaces the image's
// entrypoint and cmd, args replace cmd only (containerd's getArgs).
func TestCommandLine(t *testing.T) {
	img := Image{Entrypoint: []string{"ep"}, Cmd: []string{"cmd"}}
	for _, c := range []struct {
		command, args []string
		want          string
	}{
		{nil, nil, "ep cmd"},
		{nil, []string{"a"}, "ep a"},
		{[]string{"c"}, nil, "c"},
		{[]string{"c"}, []string{"a"}, "c a"},
	} {
		got := commandLine(corev1.Container{Command: c.command, Args: c.args}, img)
		if s := join(got); s != c.want {
			t.Errorf("command %v args %v: %q, want %q", c.command, c.args, s, c.want)
		}
	}
}

func join(a []string) string {
	s := ""
	for i, x := range a {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s
}

// TestExpandVars: the kubelet's $(VAR) expansion, and only that.
func TestExpandVars(t *testing.T) {
	env := map[string]string{"NODE_NAME": "n1"}
	for in, want := range map[string]string{
		"--node-name=$(NODE_NAME)": "--node-name=n1",
		"$(MISSING)":               "$(MISSING)",
		"$$(NODE_NAME)":            "$(NODE_NAME)",
		"$env:NODE_NAME":           "$env:NODE_NAME",
		"%NODE_NAME%":              "%NODE_NAME%",
	} {
		if got := expandVars(in, env); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// TestSandboxAndBindFilter: where a HostProcess container's files are, by
// containerd version and Windows build.
func TestSandboxAndBindFilter(t *testing.T) {
	for _, c := range []struct {
		build, containerd, sandbox string
		bind                       bool
	}{
		{"10.0.20348.2849", "1.7.24", `C:\hpc`, true},
		{"10.0.26100.2314", "2.2.1", `C:\hpc`, true},
		{"10.0.17763.6532", "1.7.24", `C:\hpc\id1`, false},
		{"10.0.20348.2849", "1.6.36", `C:\C\id1`, false},
	} {
		n := Node{OS: "windows", Build: c.build, Containerd: c.containerd}
		if got := sandboxDir(n, "id1"); got != c.sandbox || n.BindFilter() != c.bind {
			t.Errorf("%s containerd %s: sandbox %s bind %v, want %s %v", c.build, c.containerd, got, n.BindFilter(), c.sandbox, c.bind)
		}
	}
}

func hostProcessPod() *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true, SecurityContext: &corev1.PodSecurityContext{
		WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}}}}
}

// TestWindowsExecutable: what CreateProcess and cmd make of a command.
func TestWindowsExecutable(t *testing.T) {
	img := Image{Entrypoint: []string{"PowerShell"}, Files: []string{"/app/run.ps1", "/app/tool.exe"}}
	start := func(build string, c corev1.Container) Outcome {
		n := Node{OS: "windows", Build: build, Containerd: "1.7.24", Disk: vmdisk.Disk{Root: t.TempDir(), Windows: true}}
		return Start(context.Background(), n, img, Container{ID: "id1", Pod: hostProcessPod(), Spec: c})
	}
	const w2019, w2022 = "10.0.17763.6532", "10.0.20348.2849"
	for _, c := range []struct {
		name  string
		build string
		spec  corev1.Container
		state State
		msg   string
	}{
		{"program in the sandbox", w2019, corev1.Container{Command: []string{"$env:CONTAINER_SANDBOX_MOUNT_POINT/app/tool.exe"}}, Runs, ""},
		{"program without .exe", w2019, corev1.Container{Command: []string{"%CONTAINER_SANDBOX_MOUNT_POINT%/app/tool"}}, Runs, ""},
		{"script as command, 2019", w2019, corev1.Container{Command: []string{"%CONTAINER_SANDBOX_MOUNT_POINT%/app/run.ps1"}}, StartFails, "%1 is not a valid Win32 application."},
		{"missing program, 2019", w2019, corev1.Container{Command: []string{"C:/nowhere/x.exe"}}, StartFails, `failed to find executable "C:/nowhere/x.exe"`},
		{"missing program, 2022", w2022, corev1.Container{Command: []string{"C:/nowhere/x.exe"}}, Exits, "is not recognized as an internal or external command"},
		{"script through PowerShell", w2022, corev1.Container{Args: []string{"$env:CONTAINER_SANDBOX_MOUNT_POINT/app/run.ps1"}}, Runs, ""},
		{"missing script", w2022, corev1.Container{Args: []string{"$env:CONTAINER_SANDBOX_MOUNT_POINT/app/gone.ps1"}}, Exits, "The term 'C:\\hpc/app/gone.ps1' is not recognized"},
		{"missing script, -File", w2022, corev1.Container{Args: []string{"-File", "C:/x.ps1"}}, Exits, "to the -File parameter does not exist"},
		{"relative script from the working directory", w2022, corev1.Container{Args: []string{`.\run.ps1`}, WorkingDir: "$env:CONTAINER_SANDBOX_MOUNT_POINT/app/"}, Runs, ""},
		{"-File from the working directory", w2022, corev1.Container{Args: []string{"-File", "run.ps1"}, WorkingDir: "$env:CONTAINER_SANDBOX_MOUNT_POINT/app/"}, Runs, ""},
		{"bare name: PowerShell does not look in the working directory", w2022, corev1.Container{Args: []string{"run.ps1"}, WorkingDir: "$env:CONTAINER_SANDBOX_MOUNT_POINT/app/"}, Exits, "The term 'run.ps1' is not recognized"},
		{"-Command: Copy-Item then the script", w2022, corev1.Container{Args: []string{"-Command", "Copy-Item -Force -Path $env:CONTAINER_SANDBOX_MOUNT_POINT/app/tool.exe -Destination $env:CONTAINER_SANDBOX_MOUNT_POINT/app/copy.exe; & $env:CONTAINER_SANDBOX_MOUNT_POINT/app/run.ps1"}}, Runs, ""},
		{"-Command: Copy-Item of a missing file", w2022, corev1.Container{Args: []string{"-Command", "Copy-Item -Force -Path $env:CONTAINER_SANDBOX_MOUNT_POINT/gone.json -Destination $env:CONTAINER_SANDBOX_MOUNT_POINT/app/x.json; & $env:CONTAINER_SANDBOX_MOUNT_POINT/app/run.ps1"}}, Exits, "Copy-Item : Cannot find path"},
		{"-Command: & a missing script", w2022, corev1.Container{Args: []string{"-Command", "Copy-Item -Force -Path $env:CONTAINER_SANDBOX_MOUNT_POINT/app/tool.exe -Destination $env:CONTAINER_SANDBOX_MOUNT_POINT/app/copy.exe; & $env:CONTAINER_SANDBOX_MOUNT_POINT/app/gone.ps1"}}, Exits, "is not recognized"},
		{"relative script from C:\\", w2022, corev1.Container{Args: []string{`.\run.ps1`}}, Exits, `The term '.\run.ps1' is not recognized`},
	} {
		got := start(c.build, c.spec)
		if got.State != c.state || (c.msg != "" && !strings.Contains(got.Message, c.msg)) {
			t.Errorf("%s: state %d %q, want %d with %q", c.name, got.State, got.Message, c.state, c.msg)
		}
	}
}

// TestHostProcessCommandsThatEnd: a HostProcess container whose command
// completes ends with the command's exit code, through hcsshim's own
// `cmd /c` (2022, bind filter) or CreateProcess (2019); what no model
// knows keeps running.
func TestHostProcessCommandsThatEnd(t *testing.T) {
	const w2019, w2022 = "10.0.17763.6532", "10.0.20348.2849"
	for _, c := range []struct {
		name    string
		command []string
		state   State
		code    int32
		log     string
	}{
		{"cmd exit 3", []string{"cmd", "/c", "exit 3"}, Ends, 3, ""},
		{"cmd.exe exit /b 0", []string{"cmd.exe", "/c", "exit", "/b", "0"}, Ends, 0, ""},
		{"cmd echo then exit", []string{"cmd", "/c", "echo finished && exit 2"}, Ends, 2, "finished"},
		{"cmd echo only", []string{"cmd", "/c", "echo hello"}, Ends, 0, "hello"},
		{"cmd runs PowerShell", []string{"cmd", "/c", "powershell -Command exit 7"}, Ends, 7, ""},
		{"powershell exit 0", []string{"powershell", "-Command", "exit 0"}, Ends, 0, ""},
		{"powershell.exe writes then exits", []string{"powershell.exe", "-NoProfile", "-Command", "Write-Host done; exit 4"}, Ends, 4, "done"},
		{"powershell output only", []string{"powershell", "-c", "Write-Output ok"}, Ends, 0, "ok"},
		{"powershell sleeps: not modelled", []string{"powershell", "-Command", "Start-Sleep 3600"}, Runs, 0, ""},
		{"cmd of a program the host lacks: not modelled", []string{"cmd", "/c", "ping -t localhost"}, Runs, 0, ""},
		{"cmd /k stays", []string{"cmd", "/k", "exit 1"}, Runs, 0, ""},
	} {
		for _, build := range []string{w2019, w2022} {
			n := Node{OS: "windows", Build: build, Containerd: "1.7.24", Disk: vmdisk.Disk{Root: t.TempDir(), Windows: true}}
			got := Start(context.Background(), n, Image{}, Container{ID: "id1", Pod: hostProcessPod(), Spec: corev1.Container{Command: c.command}})
			if got.State != c.state || got.Code != c.code || (c.log != "" && !strings.Contains(strings.Join(got.Log, "\n"), c.log)) {
				t.Errorf("%s on %s: state %d code %d log %q (%s), want %d code %d log %q", c.name, build, got.State, got.Code, got.Log, got.Message, c.state, c.code, c.log)
			}
		}
	}
}

// TestIsolatedContainerUser: a process-isolated Windows container runs as
// its runAsUserName (container's, else pod's, else the image's USER),
// which cmd's %USERNAME% shows, and an account HCS does not know fails
// its start: the [sig-windows] SecurityContext specs' pods (kubernetes
// test/e2e/windows/security_context.go@v1.36.3 runAsUserNamePod).
func TestIsolatedContainerUser(t *testing.T) {
	nonroot := Image{User: "ContainerUser", Files: []string{"/Windows/System32/cmd.exe"}}
	echo := []string{"cmd", "/S", "/C", "echo %username%"}
	withUser := func(u string) *corev1.SecurityContext {
		return &corev1.SecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{RunAsUserName: ptr.To(u)}}
	}
	podUser := func(u string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{RunAsUserName: ptr.To(u)}}}}
	}
	for _, c := range []struct {
		name  string
		pod   *corev1.Pod
		spec  corev1.Container
		state State
		log   string
	}{
		{"the image's USER", &corev1.Pod{}, corev1.Container{Command: echo}, Ends, "ContainerUser"},
		{"the pod's user", podUser("ContainerAdministrator"), corev1.Container{Command: echo}, Ends, "ContainerAdministrator"},
		{"the container's user over the pod's", podUser("ContainerUser"), corev1.Container{Command: echo, SecurityContext: withUser("ContainerAdministrator")}, Ends, "ContainerAdministrator"},
		{"unknown user at pod level", podUser("FooLish"), corev1.Container{Command: echo}, StartFails, ""},
		{"unknown user at container level", podUser("ContainerUser"), corev1.Container{Command: echo, SecurityContext: withUser("FooLish")}, StartFails, ""},
		{"a program no model knows runs", &corev1.Pod{}, corev1.Container{Command: []string{"ping", "-t", "localhost"}}, Runs, ""},
		{"cmd's missing program runs", &corev1.Pod{}, corev1.Container{Command: []string{"cmd", "/c", "ping -t localhost"}}, Runs, ""},
	} {
		n := Node{OS: "windows", Build: "10.0.20348.2849", Containerd: "1.7.24", Disk: vmdisk.Disk{Root: t.TempDir(), Windows: true}}
		got := Start(context.Background(), n, nonroot, Container{ID: "id1", Pod: c.pod, Spec: c.spec})
		if got.State != c.state || got.Code != 0 && got.State == Ends || strings.Join(got.Log, "\n") != c.log {
			t.Errorf("%s: state %d code %d log %q (%s), want %d log %q", c.name, got.State, got.Code, got.Log, got.Message, c.state, c.log)
		}
		if c.state == StartFails && !strings.Contains(got.Message, "The user name or password is incorrect.") {
			t.Errorf("%s: %q, want HCS's unknown-account error", c.name, got.Message)
		}
	}
}

// TestIsolatedPause: the pause image's program runs until it is stopped.
func TestIsolatedPause(t *testing.T) {
	n := Node{OS: "windows", Build: "10.0.20348.2849", Containerd: "1.7.24", Disk: vmdisk.Disk{Root: t.TempDir(), Windows: true}}
	pause := Image{Entrypoint: []string{"/pause.exe"}, Files: []string{"/pause.exe"}}
	if got := Start(context.Background(), n, pause, Container{ID: "id1", Pod: &corev1.Pod{}}); got.State != Pauses {
		t.Errorf("pause: state %d (%s), want Pauses", got.State, got.Message)
	}
}
