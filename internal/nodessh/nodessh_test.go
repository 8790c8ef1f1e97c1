package nodessh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/machines/sshd"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/machines/vmshell"
	"github.com/winkube/winkube/internal/nodeaccess"
)

func newKey(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// machine starts an emulated machine's SSH server; forward makes it a
// jump host.
func machine(t testing.TB, name, addr string, user ssh.Signer, windows bool, forward func(string, int) (net.Conn, error)) *sshd.Server {
	t.Helper()
	dir := t.TempDir()
	d := vmdisk.Disk{Root: dir, Windows: windows, User: "capi"}
	srv, err := sshd.Start(sshd.Config{
		Address: addr, HostKeyFile: filepath.Join(dir, "hostkey"),
		AuthorizedKeys: map[string][]ssh.PublicKey{"capi": {user.PublicKey()}},
		Shell:          &vmshell.Machine{Hostname: name, Disk: d}, Forward: forward,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// world is a jump host in front of a Windows node at private address
// 10.1.0.5.
type world struct {
	key        ssh.Signer
	jump, node *sshd.Server
	target     *nodeaccess.Target
	known      *KnownHosts
}

func newWorld(t testing.TB) *world {
	w := &world{key: newKey(t), known: &KnownHosts{Path: filepath.Join(t.TempDir(), "known_hosts")}}
	w.node = machine(t, "win-abcde", "127.0.0.1:0", w.key, true, nil)
	w.jump = machine(t, "cp-0", "127.0.0.1:0", w.key, false, func(host string, port int) (net.Conn, error) {
		if host != "10.1.0.5" || port != 22 {
			return nil, errors.New(host + " is not a node address")
		}
		return net.Dial("tcp", w.node.Addr())
	})
	w.target = &nodeaccess.Target{Cluster: "c", Object: "AzureMachine/win", Hostname: "win-abcde", Address: "10.1.0.5", OS: infrav1.Windows, JumpHosts: []string{w.jump.Addr()}}
	return w
}

func (w *world) opts(keys ...ssh.Signer) Options {
	if len(keys) == 0 {
		keys = []ssh.Signer{w.key}
	}
	return Options{Signers: keys, KnownHosts: w.known}
}

func TestRunThroughJumpHost(t *testing.T) {
	w := newWorld(t)
	c, err := Dial(context.Background(), w.target, w.opts())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out, errb bytes.Buffer
	if err := c.Run("hostname", &out, &errb); err != nil || strings.TrimSpace(out.String()) != "win-abcde" {
		t.Fatalf("hostname through the jump host: %q, %v (%s)", out.String(), err, errb.String())
	}
	out.Reset()
	err = c.Run("Restart-Computer", &out, &errb)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Status != 127 || !strings.Contains(errb.String(), "cannot run") {
		t.Fatalf("a command the machine cannot run: %v, stderr %q", err, errb.String())
	}
	// Both hops are recorded: the jump host by its address, the node by
	// its private address as seen through that jump host.
	b, _ := os.ReadFile(w.known.Path)
	if !strings.Contains(string(b), "node-10.1.0.5-via-127.0.0.1") || strings.Count(string(b), "\n") != 2 {
		t.Fatalf("known hosts:\n%s", b)
	}
	// A control-plane target is reached through its own NAT rule.
	cp := &nodeaccess.Target{Cluster: "c", Address: "10.0.0.4", Direct: true, JumpHosts: []string{w.jump.Addr()}}
	cc, err := Dial(context.Background(), cp, w.opts())
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := cc.Run("hostname", &out, &errb); err != nil || strings.TrimSpace(out.String()) != "cp-0" || cc.Node != cc.Jump {
		t.Fatalf("a control plane directly: %q, %v", out.String(), err)
	}
	cc.Close()
	// The node itself is no jump host: its forwarding is refused.
	direct := &nodeaccess.Target{Address: "10.1.0.5", JumpHosts: []string{w.node.Addr()}}
	nc, err := DialJump(context.Background(), direct, w.opts())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.DialNodePort(3389); err == nil || !strings.Contains(err.Error(), "forwarding is disabled") {
		t.Fatalf("forwarding through a worker: %v", err)
	}
}

func TestWrongKeyAndPasswordAreRefused(t *testing.T) {
	w := newWorld(t)
	stranger := newKey(t)
	_, err := Dial(context.Background(), w.target, w.opts(stranger))
	var ae *AuthError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), ssh.FingerprintSHA256(stranger.PublicKey())) || !strings.Contains(err.Error(), "--identity") {
		t.Fatalf("a key the node does not know: %v", err)
	}
	cfg := &ssh.ClientConfig{User: "capi", Auth: []ssh.AuthMethod{ssh.Password("Passw0rd!")}, HostKeyCallback: ssh.InsecureIgnoreHostKey()}
	if _, err := ssh.Dial("tcp", w.jump.Addr(), cfg); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("password login: %v", err)
	}
}

func TestChangedHostKeyIsRefusedWithoutPrompt(t *testing.T) {
	w := newWorld(t)
	c, err := Dial(context.Background(), w.target, w.opts())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// The jump host is replaced by another machine on the same address.
	addr := w.jump.Addr()
	w.jump.Close()
	machine(t, "cp-1", addr, w.key, false, nil)
	_, err = Dial(context.Background(), w.target, w.opts())
	var he *HostKeyMismatchError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), w.known.Path) || !strings.Contains(err.Error(), "ssh-keygen -R") {
		t.Fatalf("a changed host key: %v", err)
	}
}

// BenchmarkDialAndRun is one 'winkube ssh NODE -- hostname' after name
// resolution: two SSH handshakes (jump host, node) and one command.
func BenchmarkDialAndRun(b *testing.B) {
	w := newWorld(b)
	for b.Loop() {
		c, err := Dial(context.Background(), w.target, w.opts())
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		if err := c.Run("hostname", &out, &out); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

func TestLoadSigners(t *testing.T) {
	dir := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	plain, _ := ssh.MarshalPrivateKey(priv, "")
	locked, _ := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte("secret"))
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, bad := write("good", pem.EncodeToMemory(plain)), write("locked", pem.EncodeToMemory(locked))
	junk := write("junk", []byte("not a key"))
	if _, err := LoadSigners([]string{bad}, nil, false); err == nil || !strings.Contains(err.Error(), "ssh-add") {
		t.Errorf("a named passphrase-protected key: %v", err)
	}
	if _, err := LoadSigners([]string{junk}, nil, false); err == nil {
		t.Error("a named file that is no key must be an error")
	}
	ss, err := LoadSigners(nil, []string{bad, junk, filepath.Join(dir, "missing"), good}, false)
	if err != nil || len(ss) != 1 {
		t.Errorf("defaults keep only what can be read: %d, %v", len(ss), err)
	}
	if _, err := LoadSigners(nil, []string{bad}, false); err == nil || !strings.Contains(err.Error(), "--identity") {
		t.Errorf("no usable key at all: %v", err)
	}
}

// forward runs a tunnel to the target's port 3389 on a free local port:
// its address, the connections it reports failed, and a function that
// ends it and returns what Forward returned.
func forward(t *testing.T, w *world, target *nodeaccess.Target) (string, chan error, func() error) {
	t.Helper()
	c, err := DialJump(context.Background(), target, w.opts())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	failures := make(chan error, 2)
	done := make(chan error, 1)
	go func() { done <- c.Forward(ctx, ln, 3389, func(_ net.Addr, err error) { failures <- err }) }()
	return ln.Addr().String(), failures, func() error { cancel(); return <-done }
}

// TestForwardNodePort: each local connection reaches the node's port
// through the jump host, and the tunnel ends with its context.
func TestForwardNodePort(t *testing.T) {
	w := newWorld(t)
	rdp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rdp.Close()
	go func() {
		for {
			c, err := rdp.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	jump := machine(t, "cp-1", "127.0.0.1:0", w.key, false, func(host string, p int) (net.Conn, error) {
		if host != "10.1.0.5" || p != 3389 {
			return nil, errors.New("nothing listens there")
		}
		return net.Dial("tcp", rdp.Addr().String())
	})
	addr, failures, stop := forward(t, w, &nodeaccess.Target{Cluster: "c", Address: "10.1.0.5", OS: infrav1.Windows, JumpHosts: []string{jump.Addr()}})
	for i := range 2 {
		local, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		msg := []byte("hello " + strings.Repeat("x", i))
		if _, err := local.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(local, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("connection %d through the tunnel: %q, %v", i, got, err)
		}
		local.Close()
	}
	if err := stop(); err != nil {
		t.Fatalf("the tunnel ended with %v, want nil when its context ends", err)
	}
	select {
	case err := <-failures:
		t.Fatalf("a connection failed: %v", err)
	default:
	}
}

// TestForwardReportsARefusedPort: a port the jump host does not forward
// to is reported per connection, which is closed, and the tunnel stays
// open.
func TestForwardReportsARefusedPort(t *testing.T) {
	w := newWorld(t)
	addr, failures, stop := forward(t, w, w.target)
	for range 2 {
		local, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-failures; err == nil {
			t.Fatal("no failure reported")
		}
		if _, err := local.Read(make([]byte, 1)); err == nil {
			t.Fatal("a refused connection stayed open")
		}
		local.Close()
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestKnownHostsRecordsOnlyPlainHosts: a host with a known-hosts pattern
// list or a second line in it is refused before the file is touched, so
// one recorded key cannot vouch for every host; a plain one is recorded.
func TestKnownHostsRecordsOnlyPlainHosts(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	k := &KnownHosts{Path: filepath.Join(t.TempDir(), "known_hosts")}
	for _, host := range []string{"node-10.1.0.4,*,x-via-20.1.2.3:22", "[node-10.1.0.4]:22\n* ssh-ed25519", "a b:22", "!x:22", "#c:22", "@cert-authority:22"} {
		if err := k.Callback(host)("", nil, key); err == nil || !strings.Contains(err.Error(), "refusing to record") {
			t.Errorf("host %q: %v, want a refusal", host, err)
		}
	}
	if _, err := os.Stat(k.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the known-hosts file was touched by refused hosts: %v", err)
	}
	plain := net.JoinHostPort("node-10.1.0.4-via-20.1.2.3", "22")
	if err := k.Callback(plain)("", nil, key); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(k.Path)
	if err != nil || strings.Count(string(b), "\n") != 1 || !strings.HasPrefix(string(b), "node-10.1.0.4-via-20.1.2.3 ") {
		t.Errorf("a plain host's line: %q, %v", b, err)
	}
}
