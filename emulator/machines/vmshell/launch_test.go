package vmshell

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"golang.org/x/crypto/ssh"

	"github.com/winkube/winkube/emulator/machines/sshd"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// serve runs the machine's SSH server with its shell, as a booted machine
// does, and returns a client logged in as capi.
func serve(t *testing.T, m *Machine) *ssh.Client {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sshd.Start(sshd.Config{Address: "127.0.0.1:0", HostKeyFile: filepath.Join(t.TempDir(), "host"), Shell: m,
		AuthorizedKeys: map[string][]ssh.PublicKey{"capi": {signer.PublicKey()}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{User: "capi", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(s.PublicKey()), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// session runs command over SSH, with a terminal when pty, typing input.
func session(t *testing.T, c *ssh.Client, command string, pty bool, input string) (string, int) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if pty {
		if err := sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	sess.Stdin, sess.Stdout, sess.Stderr = strings.NewReader(input), &out, &errOut
	err = sess.Run(command)
	status := 0
	if ee, ok := err.(*ssh.ExitError); ok {
		status = ee.ExitStatus()
	} else if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	return out.String() + errOut.String(), status
}

// The seeds log in to a Windows node with
// ssh -t ... capi@<windows-ip> powershell.exe: the command starts the
// shell, on the terminal -t asked for.
func TestShellCommandsStartTheShell(t *testing.T) {
	c := serve(t, windowsMachine(t))
	out, status := session(t, c, "powershell.exe", true, "hostname\rexit\r")
	if status != 0 || !strings.Contains(out, `PS C:\Users\capi> `) || !strings.Contains(out, "win-abcde") {
		t.Errorf("powershell.exe on a terminal: %d %q", status, out)
	}
	// Without a terminal, PowerShell reads commands from its input.
	if out, status := session(t, c, "pwsh -NoLogo", false, "hostname\nkubelet --version\n"); status != 0 || !strings.Contains(out, "win-abcde\nKubernetes v1.36.3\n") {
		t.Errorf("pwsh without a terminal: %d %q", status, out)
	}
	if out, status := session(t, c, "PowerShell.exe -NoProfile -Command Get-HnsNetwork | ConvertTo-Json", false, ""); status != 0 || !strings.Contains(out, `"192.168.3.0/24"`) {
		t.Errorf("powershell -Command: %d %q", status, out)
	}
	// cmd.exe is another shell: its own prompt and names, not PowerShell's.
	out, status = session(t, c, "cmd.exe", true, "hostname\rexit\r")
	if status != 0 || !strings.Contains(out, `C:\Users\capi>`) || strings.Contains(out, "PS C:") || !strings.Contains(out, "win-abcde") {
		t.Errorf("cmd.exe: %d %q", status, out)
	}
	if out, status := session(t, c, "cmd /c Get-HnsNetwork", false, ""); status != exitNotFound || !strings.Contains(out, "cannot run") {
		t.Errorf("cmd /c with a PowerShell command: %d %q", status, out)
	}
	if out, status := session(t, c, "cmd.exe /c type C:\\VAR\\log\\kubelet\\kubelet.log", false, ""); status != 0 || !strings.Contains(out, "line 4") {
		t.Errorf("cmd /c type: %d %q", status, out)
	}
	// Linux shells are not Windows'.
	if out, status := session(t, c, "bash -c hostname", false, ""); status != exitNotFound || !strings.Contains(out, "cannot run") {
		t.Errorf("bash on Windows: %d %q", status, out)
	}
}

func TestLinuxShellCommands(t *testing.T) {
	root := t.TempDir()
	m := &Machine{Hostname: "linux-abcde", Disk: vmdisk.Disk{Root: root, User: "capi"}, KubeletVersion: func() string { return "v1.36.3" }}
	c := serve(t, m)
	if out, status := session(t, c, "bash -c hostname", false, ""); status != 0 || out != "linux-abcde\n" {
		t.Errorf("bash -c: %d %q", status, out)
	}
	out, status := session(t, c, "/bin/bash -l", true, "hostname\rexit\r")
	if status != 0 || !strings.Contains(out, "capi@linux-abcde:~$ ") || !strings.Contains(out, "linux-abcde") {
		t.Errorf("bash -l on a terminal: %d %q", status, out)
	}
	if out, status := session(t, c, "powershell.exe", false, ""); status != exitNotFound || !strings.Contains(out, "cannot run") {
		t.Errorf("powershell on Linux: %d %q", status, out)
	}
}

// encode is PowerShell's -EncodedCommand form: base64 of UTF-16LE.
func encode(s string) string {
	var b []byte
	for _, r := range utf16.Encode([]rune(s)) {
		b = append(b, byte(r), byte(r>>8))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// powershell -EncodedCommand runs the decoded command, as a real one does
// (winkube node join sends its script so); a whole script is refused as
// one, since the shell runs single commands only, never taken as an
// interactive session that reads nothing and succeeds.
func TestEncodedCommand(t *testing.T) {
	c := serve(t, windowsMachine(t))
	for _, flag := range []string{"-EncodedCommand", "-ec", "-e", "-enc"} {
		if out, status := session(t, c, "powershell.exe -NoProfile -NonInteractive "+flag+" "+encode("hostname"), false, ""); status != 0 || out != "win-abcde\n" {
			t.Errorf("powershell %s hostname: %d %q", flag, status, out)
		}
	}
	script := "# a join script\n$ErrorActionPreference = 'Stop'\nhostname\n"
	out, status := session(t, c, "powershell.exe -NoProfile -ExecutionPolicy Bypass -EncodedCommand "+encode(script), false, "")
	if status != exitNotFound || !strings.Contains(out, "a script of 3 lines (# a join script ...)") {
		t.Errorf("an encoded script: %d %q", status, out)
	}
}
