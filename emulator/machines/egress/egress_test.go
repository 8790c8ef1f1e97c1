package egress_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/server/egressselector"

	"github.com/winkube/winkube/emulator/machines/egress"
)

// apiServerDialer is the dialer a kube-apiserver builds for its "cluster"
// egress from the configuration file, with k8s.io/apiserver's own code.
func apiServerDialer(t *testing.T, s *egress.Server) func(ctx context.Context, network, addr string) (net.Conn, error) {
	t.Helper()
	data, err := egress.Configuration(s.Socket())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "egress-selector-configuration.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := egressselector.ReadEgressSelectorConfiguration(path)
	if err != nil {
		t.Fatalf("the API server refuses the configuration: %v\n%s", err, data)
	}
	if errs := egressselector.ValidateEgressSelectorConfiguration(cfg); len(errs) > 0 {
		t.Fatalf("the configuration is invalid: %v", errs.ToAggregate())
	}
	sel, err := egressselector.NewEgressSelector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dial, err := sel.Lookup(egressselector.Cluster.AsNetworkContext())
	if err != nil || dial == nil {
		t.Fatalf("no dialer for the cluster egress: %v", err)
	}
	// The other egresses stay direct (no dialer: the API server's own).
	if d, _ := sel.Lookup(egressselector.Etcd.AsNetworkContext()); d != nil {
		t.Error("etcd traffic goes through the egress")
	}
	return dial
}

// TestTunnelsAsTheMachineDials: the API server's dialer reaches, through
// the socket, whatever the machine's dial connects a target to, and a
// target the machine cannot reach fails with the proxy's status, which
// the API server reports.
func TestTunnelsAsTheMachineDials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line := make([]byte, 5)
				if _, err := io.ReadFull(c, line); err == nil {
					_, _ = io.WriteString(c, "echo "+string(line))
				}
			}()
		}
	}()
	var mu sync.Mutex
	var asked []string
	last := func() string { mu.Lock(); defer mu.Unlock(); return asked[len(asked)-1] }
	// The machine: 10.96.0.10:80 is a Service whose endpoint is the
	// listener; 10.96.0.11:80 a Service without endpoints; 10.96.0.12 a
	// range nothing routes.
	s, err := egress.Start(func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		asked = append(asked, addr)
		mu.Unlock()
		switch addr {
		case "10.96.0.10:80":
			var d net.Dialer
			return d.DialContext(ctx, "tcp", ln.Addr().String())
		case "127.0.0.1:9":
			return nil, errors.New("dial tcp 127.0.0.1:9: connect: connection refused")
		}
		return nil, errors.New("dial tcp " + addr + ": i/o timeout")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dial := apiServerDialer(t, s)
	ctx := context.Background()

	c, err := dial(ctx, "tcp", "10.96.0.10:80")
	if err != nil {
		t.Fatalf("through the egress to a Service: %v", err)
	}
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "echo hello" {
		t.Errorf("the tunnel carried %q, want %q", got, "echo hello")
	}

	for addr, code := range map[string]string{"127.0.0.1:9": "code 502", "10.96.0.12:443": "code 504"} {
		_, err := dial(ctx, "tcp", addr)
		if err == nil || !strings.Contains(err.Error(), code) || !strings.Contains(err.Error(), "while dialing "+addr) {
			t.Errorf("dialing %s: %v, want the proxy's %s", addr, err, code)
		}
	}
	// A name is resolved as the machine resolves it: localhost is its
	// loopback.
	if _, err := dial(ctx, "tcp", "localhost:9"); err == nil || !strings.Contains(err.Error(), "code 502") {
		t.Errorf("dialing localhost:9: %v, want the refusal of 127.0.0.1:9", err)
	}
	if got, want := last(), "127.0.0.1:9"; got != want {
		t.Errorf("localhost was dialed as %s, want %s", got, want)
	}
}

// TestCloseDropsTunnels: a machine switched off drops the connections its
// endpoint carries, and its socket goes.
func TestCloseDropsTunnels(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			held <- c
		}
	}()
	s, err := egress.Start(func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	})
	if err != nil {
		t.Fatal(err)
	}
	dial := apiServerDialer(t, s)
	c, err := dial(context.Background(), "tcp", "10.244.1.5:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	up := <-held
	defer up.Close()
	s.Close()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("reading the dropped tunnel: %v", err)
	}
	if _, err := os.Stat(s.Socket()); !os.IsNotExist(err) {
		t.Errorf("the socket %s outlives the endpoint: %v", s.Socket(), err)
	}
	if _, err := egress.Start(nil); err == nil {
		t.Error("an endpoint without a dial started")
	}
}

// TestStartSweepsWhatDeadEndpointsLeft: an endpoint whose process was
// killed leaves its directory and socket in the temporary directory; the
// next Start removes those whose socket nothing listens on, and leaves a
// live endpoint's, one whose socket is not made yet, and a link alone.
func TestStartSweepsWhatDeadEndpointsLeft(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	live, err := egress.Start(dial)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// A killed process's endpoint: the socket file stays, nobody listens.
	dead := filepath.Join(tmp, "wk-egress-111")
	if err := os.Mkdir(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dead, "cluster.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	notYet := filepath.Join(tmp, "wk-egress-222")
	if err := os.Mkdir(notYet, 0o700); err != nil {
		t.Fatal(err)
	}
	// A link to a dead endpoint's directory is not one of ours to remove.
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(target, "cluster.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	link := filepath.Join(tmp, "wk-egress-333")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	s, err := egress.Start(dial)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead endpoint's directory is still there (%v)", err)
	}
	for _, p := range []string{live.Socket(), notYet, link, filepath.Join(target, "cluster.sock")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if c, err := net.Dial("unix", live.Socket()); err != nil {
		t.Errorf("the live endpoint stopped answering: %v", err)
	} else {
		c.Close()
	}
}
