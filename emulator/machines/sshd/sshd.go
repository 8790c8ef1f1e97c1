// Package sshd is an emulated machine's SSH server. It lets in the users
// the machine's boot data gave keys to (public keys only: password login is
// never offered), answers sessions with the machine's shell, and, on a
// jump host, forwards TCP to the addresses it is allowed to reach, as the
// control-plane VMs of a CAPZ cluster do for the nodes behind them.
package sshd

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/winkube/winkube/localports"
)

// Shell runs what a session asks for.
type Shell interface {
	// Run runs one command line and returns its exit status.
	Run(line string, out, errw io.Writer) int
	// Interactive runs a login shell on a terminal.
	Interactive(rw io.ReadWriter) int
	// Launch says whether a command line starts one of the machine's
	// shells (powershell.exe, bash, ...), and returns that shell and the
	// command given to it ("" for an interactive one).
	Launch(line string) (sh Shell, command string, ok bool)
}

// Config describes one machine's server.
type Config struct {
	// Address is host:port to listen on (port 22 of the machine).
	Address string
	// HostKeyFile keeps the host key on the machine's disk, so the key
	// stays the same when the machine boots again.
	HostKeyFile string
	// AuthorizedKeys are the keys each user may log in with.
	AuthorizedKeys map[string][]ssh.PublicKey
	Shell          Shell
	// Forward, when set, makes the machine a jump host: it opens the
	// connections direct-tcpip channels ask for, or says why not.
	Forward func(host string, port int) (net.Conn, error)
	// Audit receives a line per login and refusal, for the machine's log.
	Audit func(format string, args ...any)
}

// Server is a running SSH server.
type Server struct {
	cfg    Config
	ln     net.Listener
	signer ssh.Signer
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// Start listens and serves until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Audit == nil {
		cfg.Audit = func(string, ...any) {}
	}
	signer, err := hostKey(cfg.HostKeyFile)
	if err != nil {
		return nil, fmt.Errorf("sshd host key: %w", err)
	}
	ln, err := localports.Listen(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("sshd: %w", err)
	}
	s := &Server{cfg: cfg, ln: ln, signer: signer, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// PublicKey is the server's host key.
func (s *Server) PublicKey() ssh.PublicKey { return s.signer.PublicKey() }

// Close stops listening and ends every session.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	_ = s.ln.Close()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// hostKey loads the machine's ed25519 host key, making it on first boot.
func hostKey(path string) (ssh.Signer, error) {
	if b, err := os.ReadFile(path); err == nil {
		return ssh.ParsePrivateKey(b)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

func (s *Server) config() *ssh.ServerConfig {
	c := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			for _, k := range s.cfg.AuthorizedKeys[meta.User()] {
				if bytes.Equal(k.Marshal(), key.Marshal()) {
					s.cfg.Audit("Accepted publickey for %s from %s: %s %s", meta.User(), meta.RemoteAddr(), key.Type(), ssh.FingerprintSHA256(key))
					return &ssh.Permissions{}, nil
				}
			}
			s.cfg.Audit("Failed publickey for %s from %s: %s %s is not authorized", meta.User(), meta.RemoteAddr(), key.Type(), ssh.FingerprintSHA256(key))
			return nil, fmt.Errorf("key %s is not authorized for %s", ssh.FingerprintSHA256(key), meta.User())
		},
		// No password or keyboard-interactive callbacks: those methods are
		// never offered, as on a node whose password is random and unknown.
		ServerVersion: "SSH-2.0-winkube_emulated_machine",
	}
	c.AddHostKey(s.signer)
	return c
}

func (s *Server) serve() {
	defer s.wg.Done()
	cfg := s.config()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(c, cfg)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

func (s *Server) handle(c net.Conn, cfg *ssh.ServerConfig) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	defer conn.Close()
	go ssh.DiscardRequests(reqs) // remote forwarding (tcpip-forward) is refused
	var wg sync.WaitGroup
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); s.session(ch, creqs) }()
		case "direct-tcpip":
			wg.Add(1)
			go func() { defer wg.Done(); s.directTCPIP(nc) }()
		default:
			_ = nc.Reject(ssh.UnknownChannelType, "channel type "+nc.ChannelType()+" is not supported")
		}
	}
	wg.Wait()
}

func exitStatus(ch ssh.Channel, status int) {
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, uint32(status))
	_, _ = ch.SendRequest("exit-status", false, b)
}

// session serves one session channel: a command, or a shell.
func (s *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	pty := false
	for req := range reqs {
		switch req.Type {
		case "pty-req":
			pty = true
			_ = req.Reply(true, nil)
		case "env", "window-change":
			_ = req.Reply(true, nil)
		case "exec":
			var p struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &p); err != nil {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			// 'ssh host powershell.exe' starts the machine's shell, as
			// a real sshd's exec of the shell binary would.
			if sh, command, ok := s.cfg.Shell.Launch(p.Command); ok {
				if command != "" {
					exitStatus(ch, sh.Run(command, ch, ch.Stderr()))
					return
				}
				go ssh.DiscardRequests(reqs)
				exitStatus(ch, serveShell(sh, pty, ch))
				return
			}
			exitStatus(ch, s.cfg.Shell.Run(p.Command, ch, ch.Stderr()))
			return
		case "shell":
			_ = req.Reply(true, nil)
			go ssh.DiscardRequests(reqs)
			exitStatus(ch, serveShell(s.cfg.Shell, pty, ch))
			return
		case "subsystem":
			// sftp and the like would need a real file server.
			_ = req.Reply(false, nil)
			fmt.Fprintln(ch.Stderr(), "winkube: this emulated machine has no subsystems (no sftp)")
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// serveShell runs a shell on the session: interactive on a terminal, or
// one command a line, as from a pipe, without one.
func serveShell(sh Shell, pty bool, ch ssh.Channel) int {
	if pty {
		return sh.Interactive(ch)
	}
	status := 0
	sc := bufio.NewScanner(ch)
	for sc.Scan() {
		status = sh.Run(sc.Text(), ch, ch.Stderr())
	}
	return status
}

// directTCPIP opens a forwarded connection (ssh -J, -L) if this machine
// may reach the address.
func (s *Server) directTCPIP(nc ssh.NewChannel) {
	var p struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	if s.cfg.Forward == nil {
		s.cfg.Audit("Refused forwarding to %s:%d: not a jump host", p.Host, p.Port)
		_ = nc.Reject(ssh.Prohibited, "TCP forwarding is disabled on this machine: only control-plane machines are jump hosts")
		return
	}
	up, err := s.cfg.Forward(p.Host, int(p.Port))
	if err != nil {
		s.cfg.Audit("Refused forwarding to %s:%d: %v", p.Host, p.Port, err)
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		_ = up.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(ch, up); _ = ch.CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(up, ch); closeWrite(up); done <- struct{}{} }()
	<-done
	<-done
	_ = ch.Close()
	_ = up.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
