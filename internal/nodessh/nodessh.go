// Package nodessh connects to a workload cluster's machines over SSH the
// way CAPZ's clusters are reached: to a control-plane VM through its NAT
// port on the API server's public address, and from there, as a jump
// host, to the private address of any other node. Host keys are checked
// against winkube's known-hosts file; nothing ever prompts.
package nodessh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/term"

	"github.com/winkube/winkube/internal/nodeaccess"
	"github.com/winkube/winkube/localports"
)

// DefaultUser is the user CAPZ's images and bootstrap data create.
const DefaultUser = "capi"

// Options say who logs in, with which keys, and how hosts are checked.
type Options struct {
	User       string
	Signers    []ssh.Signer
	KnownHosts *KnownHosts
	// Timeout bounds each connection's set-up (15s when 0).
	Timeout time.Duration
	// Progress, when set, is told each hop.
	Progress func(string)
}

// DefaultKeyFiles are the private keys ssh would offer by default that
// exist on this machine.
func DefaultKeyFiles() []string {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		p := filepath.Join(home, ".ssh", n)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// LoadSigners reads private keys: files the user named, which must be
// readable, and default files, which are skipped when they are not (a
// passphrase-protected default key is ssh-agent's to offer); and the
// agent's keys when useAgent and SSH_AUTH_SOCK is set. A named
// passphrase-protected file is refused with the advice to use the agent,
// since winkube never prompts.
func LoadSigners(named, defaults []string, useAgent bool) ([]ssh.Signer, error) {
	var out []ssh.Signer
	for _, f := range named {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("identity %s: %w", f, err)
		}
		s, err := ssh.ParsePrivateKey(b)
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, fmt.Errorf("identity %s is protected by a passphrase: add it to ssh-agent (ssh-add %s) and winkube uses the agent", f, f)
		}
		if err != nil {
			return nil, fmt.Errorf("identity %s is not a private key winkube can read: %w", f, err)
		}
		out = append(out, s)
	}
	for _, f := range defaults {
		if b, err := os.ReadFile(f); err == nil {
			if s, err := ssh.ParsePrivateKey(b); err == nil {
				out = append(out, s)
			}
		}
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); useAgent && sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			if ss, err := agent.NewClient(c).Signers(); err == nil {
				out = append(out, ss...)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no SSH key to log in with: pass --identity FILE (the private key whose public half the cluster was created with), or run ssh-agent")
	}
	return out, nil
}

// Conn is a connection to a node, and to the jump host it went through.
type Conn struct {
	Target *nodeaccess.Target
	// Node is the SSH connection to the node itself.
	Node *ssh.Client
	// Jump is the jump host's connection; the same as Node when the node
	// is the jump host.
	Jump *ssh.Client
	// Via is the jump host's address (host:port).
	Via string
}

// Close ends both connections.
func (c *Conn) Close() {
	_ = c.Node.Close()
	if c.Jump != c.Node {
		_ = c.Jump.Close()
	}
}

// AuthError says that the server refused every key offered.
type AuthError struct {
	User, Host   string
	Fingerprints []string
	Err          error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("%s@%s refused the key(s) offered (%s): a node lets in only the keys of its bootstrap data (users[].sshAuthorizedKeys, and the VM's SSH key on Linux); pass the matching private key with --identity",
		e.User, e.Host, strings.Join(e.Fingerprints, ", "))
}

func (e *AuthError) Unwrap() error { return e.Err }

func (o *Options) user() string {
	if o.User == "" {
		return DefaultUser
	}
	return o.User
}

func (o *Options) config(hostAlias string) *ssh.ClientConfig {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	return &ssh.ClientConfig{User: o.user(), Auth: []ssh.AuthMethod{ssh.PublicKeys(o.Signers...)},
		HostKeyCallback: o.KnownHosts.Callback(hostAlias), Timeout: timeout}
}

func (o *Options) wrap(err error, host string) error {
	if err != nil && strings.Contains(err.Error(), "unable to authenticate") {
		ae := &AuthError{User: o.user(), Host: host, Err: err}
		for _, s := range o.Signers {
			ae.Fingerprints = append(ae.Fingerprints, ssh.FingerprintSHA256(s.PublicKey()))
		}
		return ae
	}
	return err
}

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// final says whether trying another jump host would not help.
func final(err error) bool {
	var ae *AuthError
	var he *HostKeyMismatchError
	return errors.As(err, &ae) || errors.As(err, &he)
}

// dialJump connects to a jump host's NAT address (its privileged port may
// be served at the local world's alternate, see localports).
func (o *Options) dialJump(ctx context.Context, addr string) (*ssh.Client, error) {
	cfg := o.config(addr)
	var err error
	for _, a := range localports.Candidates(addr) {
		var c net.Conn
		d := net.Dialer{Timeout: cfg.Timeout}
		if c, err = d.DialContext(ctx, "tcp", a); err != nil {
			continue
		}
		sc, chans, reqs, herr := ssh.NewClientConn(c, addr, cfg)
		if herr != nil {
			_ = c.Close()
			return nil, o.wrap(herr, addr)
		}
		return ssh.NewClient(sc, chans, reqs), nil
	}
	return nil, err
}

// NodeAlias is how the known-hosts file names a node reached through a
// jump host: private addresses repeat from cluster to cluster, so the jump
// host's public address is part of the name.
func NodeAlias(address, jump string) string {
	host, _, err := net.SplitHostPort(jump)
	if err != nil {
		host = jump
	}
	return net.JoinHostPort("node-"+address+"-via-"+host, "22")
}

// Dial connects to the target: through the first jump host that answers,
// to the node's port 22; a control-plane target is its own jump host.
func Dial(ctx context.Context, t *nodeaccess.Target, o Options) (*Conn, error) {
	c, err := DialJump(ctx, t, o)
	if err != nil {
		return nil, err
	}
	if t.Direct && c.Via == t.JumpHosts[0] {
		return c, nil
	}
	node, err := o.hop(c.Jump, t.Address, c.Via)
	if err != nil {
		_ = c.Jump.Close()
		return nil, err
	}
	c.Node = node
	return c, nil
}

// hop opens SSH to address:22 over the jump host's forwarding.
func (o *Options) hop(jump *ssh.Client, address, via string) (*ssh.Client, error) {
	o.progress("connecting to %s:22 through %s", address, via)
	nc, err := jump.Dial("tcp", net.JoinHostPort(address, "22"))
	if err != nil {
		return nil, fmt.Errorf("jump host %s could not reach %s:22: %w", via, address, err)
	}
	alias := NodeAlias(address, via)
	sc, chans, reqs, err := ssh.NewClientConn(nc, alias, o.config(alias))
	if err != nil {
		_ = nc.Close()
		return nil, o.wrap(err, address)
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

// DialNodePort opens a TCP connection to a port of the node's private
// address through the jump host, as ssh -L does.
func (c *Conn) DialNodePort(port int) (net.Conn, error) {
	return c.Jump.Dial("tcp", net.JoinHostPort(c.Target.Address, fmt.Sprint(port)))
}

// ExitError is a command's non-zero exit status on the node.
type ExitError struct{ Status int }

func (e *ExitError) Error() string { return fmt.Sprintf("the command exited with status %d", e.Status) }

// Run runs a command on the node, streaming its output; a non-zero exit
// is an *ExitError.
func (c *Conn) Run(cmd string, stdout, stderr io.Writer) error {
	s, err := c.Node.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	s.Stdout, s.Stderr = stdout, stderr
	return exitErr(s.Run(cmd))
}

func exitErr(err error) error {
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return &ExitError{Status: ee.ExitStatus()}
	}
	return err
}

// Shell runs an interactive shell: with a terminal (raw mode, the
// window's size) when in is one, otherwise commands are read from in.
func (c *Conn) Shell(in io.Reader, out, errw io.Writer) error {
	s, err := c.Node.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	s.Stdin, s.Stdout, s.Stderr = in, out, errw
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		w, h, err := term.GetSize(int(f.Fd()))
		if err != nil {
			w, h = 80, 24
		}
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return err
		}
		defer func() { _ = term.Restore(int(f.Fd()), old) }()
		termType := os.Getenv("TERM")
		if termType == "" {
			termType = "xterm-256color"
		}
		if err := s.RequestPty(termType, h, w, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
			return err
		}
	}
	if err := s.Shell(); err != nil {
		return err
	}
	return exitErr(s.Wait())
}

// DialJump connects to the first jump host that answers, for tunnels to
// the node's ports (Remote Desktop) that need no login on the node.
func DialJump(ctx context.Context, t *nodeaccess.Target, o Options) (*Conn, error) {
	var lastErr error
	for _, jh := range t.JumpHosts {
		o.progress("connecting to jump host %s@%s", o.user(), jh)
		jump, err := o.dialJump(ctx, jh)
		if err == nil {
			return &Conn{Target: t, Node: jump, Jump: jump, Via: jh}, nil
		}
		if final(err) {
			return nil, err
		}
		lastErr = fmt.Errorf("jump host %s: %w", jh, err)
	}
	if lastErr == nil {
		lastErr = errors.New("the cluster has no jump host")
	}
	return nil, fmt.Errorf("no jump host of cluster %s answered: %w", t.Cluster, lastErr)
}

// Forward accepts connections on ln and carries each to port of the node's
// private address through the jump host, as ssh -L does, until ctx ends
// (which closes ln) or ln fails. A connection the node does not take is
// told to failed and closed; the others keep going.
func (c *Conn) Forward(ctx context.Context, ln net.Listener, port int, failed func(from net.Addr, err error)) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		local, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer local.Close()
			remote, err := c.DialNodePort(port)
			if err != nil {
				failed(local.RemoteAddr(), err)
				return
			}
			defer remote.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(remote, local); done <- struct{}{} }()
			go func() { _, _ = io.Copy(local, remote); done <- struct{}{} }()
			select {
			case <-done:
			case <-ctx.Done():
			}
		}()
	}
}
