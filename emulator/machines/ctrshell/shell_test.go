package ctrshell

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

// windowsContainer is seed 003's pod on a Windows node: a ConfigMap at
// "C:\\etc\\foo", a Secret at "C:/etc/bar" and emptyDirs at "/cache" and
// "C:/scratch", in an image of ref.
func windowsContainer(t *testing.T, ref string) *Container {
	t.Helper()
	disk := vmdisk.Disk{Root: t.TempDir(), Windows: true}
	files, _ := registry.BaseFiles(ref, "windows")
	view := containerruntime.ContainerView(containerruntime.Node{OS: "windows", Disk: disk}, files, []containerruntime.Mount{
		{At: `C:\etc\foo`, Files: map[string][]byte{"key": []byte("from-configmap")}, ReadOnly: true},
		{At: "C:/etc/bar", Files: map[string][]byte{"password": []byte("s3cret")}, ReadOnly: true},
		{At: "/cache", HostDir: `C:\var\lib\kubelet\pods\u1\volumes\kubernetes.io~empty-dir\cache`},
		{At: "C:/scratch", HostDir: `C:\var\lib\kubelet\pods\u1\volumes\kubernetes.io~empty-dir\scratch`},
	})
	for _, d := range []string{`C:\var\lib\kubelet\pods\u1\volumes\kubernetes.io~empty-dir\cache`, `C:\var\lib\kubelet\pods\u1\volumes\kubernetes.io~empty-dir\scratch`} {
		if err := view.Mkdir(d, `C:\`); err != nil {
			t.Fatal(err)
		}
	}
	return &Container{Pod: "default/win", Name: "app", ID: "c0ffee", Hostname: "win-web", Env: []string{"PASSWORD=s3cret"}, FS: view}
}

func run(t *testing.T, c *Container, argv []string, stdin string) (code int, out, errs string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	var in *strings.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	if in == nil {
		code, err = Exec(c, argv, nil, &o, &e, false)
	} else {
		code, err = Exec(c, argv, in, &o, &e, false)
	}
	return code, o.String(), e.String(), err
}

func TestWindowsShellsSeeTheContainer(t *testing.T) {
	c := windowsContainer(t, "mcr.microsoft.com/windows/servercore:ltsc2022")
	cases := []struct {
		argv []string
		code int
		out  string
	}{
		{[]string{"hostname"}, 0, "win-web\n"},
		{[]string{"cmd", "/c", `type C:\etc\foo\key`}, 0, "from-configmap"},
		{[]string{"cmd", "/c", "echo %PASSWORD%"}, 0, "s3cret\n"},
		{[]string{"cmd.exe", "/c", `dir C:\etc\bar`}, 0, "password"},
		{[]string{"powershell", "-Command", "Get-Content /etc/bar/password"}, 0, "s3cret\n"},
		{[]string{"powershell", "-Command", "$env:PASSWORD"}, 0, "s3cret\n"},
		{[]string{"powershell", "-Command", "Get-ChildItem env:"}, 0, "PASSWORD"},
		{[]string{"powershell.exe", "-Command", `Set-Location C:\etc; Get-Location`}, 0, `C:\etc`},
	}
	for _, tc := range cases {
		code, out, _, err := run(t, c, tc.argv, "")
		if err != nil || code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("%q: code %d err %v, output %q; want code %d with %q", tc.argv, code, err, out, tc.code, tc.out)
		}
	}
}

// A write to an emptyDir, in either spelling of its path, is seen by a
// later exec through the other spelling; a ConfigMap volume is read-only
// to cmd as it is on a node ("Access is denied.").
func TestWindowsWritesPersistWhereTheyLand(t *testing.T) {
	c := windowsContainer(t, "mcr.microsoft.com/windows/servercore:ltsc2022")
	if code, _, errs, err := run(t, c, []string{"cmd", "/c", `echo hello> C:\cache\greeting.txt`}, ""); code != 0 || err != nil {
		t.Fatalf("write: %d %v %s", code, err, errs)
	}
	if code, out, _, _ := run(t, c, []string{"powershell", "-Command", "Get-Content /cache/greeting.txt"}, ""); code != 0 || out != "hello\n" {
		t.Errorf("read back: %d %q", code, out)
	}
	if code, _, _, _ := run(t, c, []string{"powershell", "-Command", `"more" | Out-File C:/scratch/log.txt; Add-Content C:\scratch\log.txt again`}, ""); code != 0 {
		t.Errorf("Out-File/Add-Content: %d", code)
	}
	if _, out, _, _ := run(t, c, []string{"cmd", "/c", `type \scratch\log.txt`}, ""); out != "more\r\nagain\r\n" {
		t.Errorf("log.txt holds %q", out)
	}
	// The writable layer: a directory made outside every volume.
	if code, _, errs, _ := run(t, c, []string{"cmd", "/c", `mkdir C:\work && echo x> C:\work\f`}, ""); code != 0 {
		t.Errorf("mkdir in the layer: %d %s", code, errs)
	}
	if _, out, _, _ := run(t, c, []string{"powershell", "-Command", `Get-ChildItem C:\`}, ""); !strings.Contains(out, "work") || !strings.Contains(out, "etc") || !strings.Contains(out, "Windows") {
		t.Errorf("C:\\ lists %q", out)
	}
}

func TestRefusalsInTheShellsWords(t *testing.T) {
	c := windowsContainer(t, "mcr.microsoft.com/windows/servercore:ltsc2022")
	code, _, errs, _ := run(t, c, []string{"cmd", "/c", "ipconfig2"}, "")
	if code != 9009 || !strings.Contains(errs, "'ipconfig2' is not recognized as an internal or external command,\noperable program or batch file.") {
		t.Errorf("cmd: %d %q", code, errs)
	}
	code, _, errs, _ = run(t, c, []string{"powershell", "-Command", "Get-Process"}, "")
	if code != 1 || !strings.Contains(errs, "Get-Process : The term 'Get-Process' is not recognized as the name of a cmdlet") || !strings.Contains(errs, "CommandNotFoundException") {
		t.Errorf("powershell: %d %q", code, errs)
	}
	// Once per session: the notice is one line however many commands run.
	_, _, errs, _ = run(t, c, []string{"cmd"}, "echo a\r\necho b\r\nexit 3\r\n")
	if n := strings.Count(errs, "winkube: cmd.exe in container app of pod default/win is winkube's simulated shell"); n != 1 || !strings.Contains(errs, "no application process runs") {
		t.Errorf("notice %d times: %q", n, errs)
	}
}

// Nano Server has cmd but no PowerShell: the runtime cannot start it,
// with hcsshim's CreateProcess error naming the container.
func TestNanoServerHasNoPowerShell(t *testing.T) {
	c := windowsContainer(t, "mcr.microsoft.com/windows/nanoserver:ltsc2022")
	_, _, _, err := run(t, c, []string{"powershell"}, "")
	var se *StartError
	if !errors.As(err, &se) || !strings.Contains(se.Message, "hcs::System::CreateProcess c0ffee: The system cannot find the file specified.: unknown") || !strings.HasPrefix(se.Message, "failed to exec in container: failed to start exec ") {
		t.Fatalf("powershell in nanoserver: %v", err)
	}
	if code, out, _, err := run(t, c, []string{"cmd", "/c", "echo ok"}, ""); code != 0 || err != nil || out != "ok\n" {
		t.Errorf("cmd in nanoserver: %d %v %q", code, err, out)
	}
}

func linuxContainer(t *testing.T, ref string) *Container {
	t.Helper()
	disk := vmdisk.Disk{Root: t.TempDir()}
	files, _ := registry.BaseFiles(ref, "linux")
	view := containerruntime.ContainerView(containerruntime.Node{OS: "linux", Disk: disk}, files, []containerruntime.Mount{
		{At: "/etc/foo", Files: map[string][]byte{"key": []byte("v1")}, ReadOnly: true},
		{At: "/cache", HostDir: "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache"},
	})
	if err := view.Mkdir("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache", "/"); err != nil {
		t.Fatal(err)
	}
	return &Container{Pod: "default/bb", Name: "bb", ID: "abc", Hostname: "bb", Env: []string{"HOSTNAME=bb", "KEY=v1"}, FS: view}
}

func TestLinuxShell(t *testing.T) {
	c := linuxContainer(t, "docker.io/library/busybox:1.36")
	cases := []struct {
		argv []string
		code int
		out  string
	}{
		{[]string{"cat", "/etc/foo/key"}, 0, "v1"},
		{[]string{"env"}, 0, "HOSTNAME=bb\nKEY=v1\n"},
		{[]string{"sh", "-c", "echo $KEY > /cache/k && cat /cache/k"}, 0, "v1\n"},
		{[]string{"/bin/sh", "-c", "cd /etc/foo; pwd; ls"}, 0, "/etc/foo\nkey\n"},
		{[]string{"sh", "-c", "ls /"}, 0, "bin\ncache\netc\n"},
	}
	for _, tc := range cases {
		code, out, _, err := run(t, c, tc.argv, "")
		if err != nil || code != tc.code || out != tc.out && !strings.Contains(out, tc.out) {
			t.Errorf("%q: code %d err %v, output %q; want %d %q", tc.argv, code, err, out, tc.code, tc.out)
		}
	}
	code, _, errs, _ := run(t, c, []string{"sh", "-c", "curl x"}, "")
	if code != 127 || !strings.Contains(errs, "sh: curl: not found") {
		t.Errorf("unknown command: %d %q", code, errs)
	}
	code, _, errs, _ = run(t, c, []string{"sh", "-c", "echo x > /etc/foo/key"}, "")
	if code != 1 || !strings.Contains(errs, "can't create /etc/foo/key: Read-only file system") {
		t.Errorf("write to a ConfigMap volume: %d %q", code, errs)
	}
	_, _, _, err := run(t, c, []string{"bash"}, "")
	var se *StartError
	if !errors.As(err, &se) || !strings.Contains(se.Message, `exec: "bash": executable file not found in $PATH: unknown`) {
		t.Errorf("bash in busybox: %v", err)
	}
}

// With a terminal, input is echoed and lines end in CRLF, as a pty does.
func TestTerminalEchoes(t *testing.T) {
	c := linuxContainer(t, "docker.io/library/busybox:1.36")
	var o, e bytes.Buffer
	code, err := Exec(c, []string{"sh"}, strings.NewReader("hostname\rexit 4\r"), &o, &e, true)
	if err != nil || code != 4 {
		t.Fatalf("code %d err %v", code, err)
	}
	if !strings.Contains(o.String(), "/ # hostname\r\nbb\r\n/ # exit 4") {
		t.Errorf("terminal shows %q", o.String())
	}
}
