package sshd

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

type echoShell struct{}

func (echoShell) Run(line string, out, _ io.Writer) int {
	_, _ = io.WriteString(out, "ran "+line+"\n")
	return len(line) % 3
}

func (echoShell) Interactive(rw io.ReadWriter) int { return 0 }

func (echoShell) Launch(string) (Shell, string, bool) { return nil, "", false }

// The host key is made once and kept on the machine's disk, so a machine
// that boots again is the same host to its clients.
func TestHostKeyOutlivesARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "etc", "ssh", "ssh_host_ed25519_key")
	var keys [2]string
	for i := range keys {
		s, err := Start(Config{Address: "127.0.0.1:0", HostKeyFile: file, Shell: echoShell{}})
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = ssh.FingerprintSHA256(s.PublicKey())
		s.Close()
	}
	if keys[0] != keys[1] {
		t.Fatalf("host key changed across a restart: %s then %s", keys[0], keys[1])
	}
}

// Commands without a terminal are read one a line, as from a pipe, and
// the last one's status is the session's.
func TestShellWithoutTerminalRunsLines(t *testing.T) {
	dir := t.TempDir()
	signer, err := hostKey(filepath.Join(dir, "user"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(Config{Address: "127.0.0.1:0", HostKeyFile: filepath.Join(dir, "host"), Shell: echoShell{},
		AuthorizedKeys: map[string][]ssh.PublicKey{"capi": {signer.PublicKey()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{User: "capi", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(s.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sess.Stdin, sess.Stdout = strings.NewReader("a\nbb\n"), &out
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	err = sess.Wait()
	ee, ok := err.(*ssh.ExitError)
	if !ok || ee.ExitStatus() != 2 || out.String() != "ran a\nran bb\n" {
		t.Fatalf("shell: %q, %v", out.String(), err)
	}
	// Another user, with the same key, is not let in.
	if _, err := ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(s.PublicKey())}); err == nil {
		t.Fatal("root logged in with capi's key")
	}
}
