// Package egress lets a control-plane machine's kube-apiserver reach the
// cluster network as it does on a real control-plane machine.
//
// On a real machine the API server runs in the machine's own network
// namespace: its connections to a Service's ClusterIP go through that
// node's kube-proxy rules, to a pod IP through the node's routes (the CNI),
// to anything else directly. In the local world the API server is a
// process on the host, where ClusterIPs and pod IPs lead nowhere. The one
// hook a kube-apiserver binary offers for its connections into the cluster
// is its egress selector (--egress-selector-config-file, egress "cluster";
// k8s.io/apiserver@v0.36.3 pkg/server/egressselector): the aggregator's
// connections to APIServices, admission and authentication webhooks, the
// kubelet client (logs, exec, port-forward) and the pods/services/nodes
// proxy subresources all dial through it (k8s.io/kubernetes@v1.36.3
// cmd/kube-apiserver/app/server.go, k8s.io/kube-aggregator@v0.36.3
// pkg/apiserver/apiserver.go, k8s.io/apiserver@v0.36.3
// pkg/util/webhook/authentication.go). Konnectivity uses the same API to
// send that traffic through agents on the nodes; here the endpoint stands
// for the machine's own network namespace instead: an HTTP CONNECT server
// on a Unix socket that dials each target as the machine's own processes
// do.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
	"sigs.k8s.io/yaml"
)

// Dial connects from the machine to a host:port whose host is an address.
type Dial func(ctx context.Context, addr string) (net.Conn, error)

// dialTimeout bounds one dial, as http.DefaultTransport's dialer does (the
// egress selector's gRPC connector uses the same 30s for the same reason).
const dialTimeout = 30 * time.Second

// Server is a machine's CONNECT endpoint.
type Server struct {
	dial Dial
	dir  string
	ln   net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// Start listens on a fresh Unix socket. Its directory stands for the
// machine's /run (runtime state, gone when the machine stops); it is a
// short one of the host's because a socket's path is limited to 108 bytes
// (unix(7), sun_path), which a machine's disk under a test's temporary
// directory can exceed.
func Start(dial Dial) (*Server, error) {
	if dial == nil {
		return nil, errors.New("egress: the machine has no way to dial")
	}
	sweepStale(os.TempDir())
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", filepath.Join(dir, socketName))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	s := &Server{dial: dial, dir: dir, ln: ln, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

const (
	dirPrefix  = "wk-egress-"
	socketName = "cluster.sock"
)

// sweepStale removes what endpoints of this user left behind when their
// process ended without closing them (a SIGKILL, a crash, a parent's
// death signal): their socket file stays, and a dial of it is refused, as
// nothing listens on it any more. A live endpoint accepts; a directory
// that is a link, another user's, or whose socket is not there yet (a
// Start between its MkdirTemp and its Listen) is left alone.
func sweepStale(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
	for _, d := range dirs {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() || !ownedByMe(fi) {
			continue
		}
		sock := filepath.Join(d, socketName)
		if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			_ = c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.RemoveAll(d)
		}
	}
}

// Socket is the Unix socket's path, the UDS name of the egress selection.
func (s *Server) Socket() string { return s.ln.Addr().String() }

// Close stops the endpoint and drops the connections it carries, as the
// machine switched off drops its own.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	s.wg.Wait()
	_ = os.RemoveAll(s.dir)
}

// track records an open connection; false once the server is closed.
func (s *Server) track(c net.Conn, on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !on {
		delete(s.conns, c)
		return true
	}
	if s.closed {
		return false
	}
	s.conns[c] = true
	return true
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		if !s.track(c, true) {
			_ = c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.track(c, false)
			s.handle(c)
		}()
	}
}

// handle answers one CONNECT as an HTTP CONNECT proxy does: 200 once the
// target is connected, then the bytes both ways; a failed dial answers
// 502 Bad Gateway, or 504 Gateway Timeout for a timeout, with the dial
// error as the body (the status codes konnectivity's server gives for a
// failed dial: apiserver-network-proxy pkg/server/server.go,
// mapDialErrorToHTTPStatus, 4f8517c1). The API server reports the status
// line in its error (egress_selector.go, tunnelHTTPConnect).
func (s *Server) handle(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(dialTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if req.Method != http.MethodConnect {
		answer(c, http.StatusMethodNotAllowed, "the egress endpoint tunnels CONNECT requests only, not "+req.Method)
		return
	}
	target := req.URL.Host
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := s.dialName(ctx, target)
	cancel()
	if err != nil {
		answer(c, status(err), err.Error())
		return
	}
	if !s.track(up, true) {
		_ = up.Close()
		return
	}
	defer s.track(up, false)
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	// What the client sent after its CONNECT (the API server waits for the
	// 200 first, as TLS's client speaks first, but another client may not).
	if n := br.Buffered(); n > 0 {
		head, _ := br.Peek(n)
		if _, err := up.Write(head); err != nil {
			return
		}
	}
	splice(c, up)
}

// dialName resolves a name as the machine's resolver would (the host's
// stands for it: "localhost" is the machine's loopback through
// /etc/hosts) and dials the first address that answers.
func (s *Server) dialName(ctx context.Context, target string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("CONNECT target %q: %w", target, err)
	}
	if net.ParseIP(host) != nil {
		return s.dial(ctx, target)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil {
		return nil, fmt.Errorf("dial tcp %s: %w", target, err)
	}
	var last error
	for _, a := range addrs {
		c, err := s.dial(ctx, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

func status(err error) int {
	var ne net.Error
	msg := strings.ToLower(err.Error())
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) || strings.Contains(msg, "timeout") || strings.Contains(msg, "timed out") {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

func answer(c net.Conn, code int, body string) {
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", code, http.StatusText(code), len(body), body)
}

// splice copies both ways until both are done, passing a half-close on
// where the connection allows it.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// Configuration is the EgressSelectorConfiguration that sends the API
// server's "cluster" traffic through the socket; the control-plane and
// etcd traffic stay direct, as without a configuration.
func Configuration(socket string) ([]byte, error) {
	cfg := apiserverv1beta1.EgressSelectorConfiguration{
		EgressSelections: []apiserverv1beta1.EgressSelection{{
			Name: "cluster",
			Connection: apiserverv1beta1.Connection{
				ProxyProtocol: apiserverv1beta1.ProtocolHTTPConnect,
				Transport:     &apiserverv1beta1.Transport{UDS: &apiserverv1beta1.UDSTransport{UDSName: socket}},
			},
		}},
	}
	cfg.APIVersion, cfg.Kind = apiserverv1beta1.SchemeGroupVersion.String(), "EgressSelectorConfiguration"
	return yaml.Marshal(cfg)
}
