package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/netlocal/localports"
)

// LogService is the node log kube-proxy writes (vmdisk.LogPath places it).
const LogService = "kube-proxy"

// NodeConfig describes the node a proxy runs on.
type NodeConfig struct {
	NodeName string
	// Address is the node's host address, where NodePorts listen.
	Address netip.Addr
	// Windows nodes follow the Windows data plane's limits (windows.go);
	// KernelVersion is the node's build ("10.0.17763.6532").
	Windows       bool
	KernelVersion string
	Logs          *vmdisk.Logs
}

// Node is one node's kube-proxy.
type Node struct {
	c   *Cluster
	cfg NodeConfig
	lim limits

	mu     sync.Mutex
	active bool
	closed bool
	// listeners by port; each belongs to one Service.
	listeners map[int32]*listener
	// refused are the Services whose load-balancer policy the Windows
	// data plane refused (too many endpoints), logged once per refusal.
	refused map[string]bool
	// sticky is ClientIP session affinity: service/port/client -> endpoint.
	sticky map[string]stickyEntry
	next   map[string]int
	// now is the affinity's clock.
	now func() time.Time
}

type stickyEntry struct {
	addr    string
	expires time.Time
}

type listener struct {
	svc    string
	port   string // the Service port's name; "" for the health check
	health bool
	ln     net.Listener
	srv    *http.Server
}

// Node adds a node's proxy; it serves nothing until SetActive(true), as a
// node programs no Service rules before its kube-proxy pod runs.
func (c *Cluster) Node(cfg NodeConfig) *Node {
	n := &Node{c: c, cfg: cfg, lim: limitsOf(cfg), listeners: map[int32]*listener{}, refused: map[string]bool{}, sticky: map[string]stickyEntry{}, next: map[string]int{}, now: time.Now}
	c.attach(n)
	return n
}

// SetActive says whether the node's kube-proxy has programmed its rules:
// true once its pod ran on the node. Rules stay while it is true, as
// iptables rules and HNS policies outlive a crashed kube-proxy.
func (n *Node) SetActive(on bool) {
	n.mu.Lock()
	if n.closed || n.active == on {
		n.mu.Unlock()
		return
	}
	n.active = on
	n.mu.Unlock()
	if on {
		n.cfg.Logs.Write(LogService, "Using %s proxier on node %s (%s)", n.mode(), n.cfg.NodeName, n.cfg.Address)
		n.c.attach(n)
		return
	}
	n.closeAll()
}

func (n *Node) mode() string {
	if n.cfg.Windows {
		return "kernelspace (HNS)"
	}
	return "iptables"
}

// Close stops the node's proxy: the machine is off or gone.
func (n *Node) Close() {
	n.mu.Lock()
	n.closed, n.active = true, false
	n.mu.Unlock()
	n.c.detach(n)
	n.closeAll()
}

func (n *Node) closeAll() {
	n.mu.Lock()
	ls := n.listeners
	n.listeners = map[int32]*listener{}
	n.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

func (l *listener) close() {
	if l.srv != nil {
		_ = l.srv.Close()
		return
	}
	_ = l.ln.Close()
}

// apply brings the node's listeners for one Service to what its current
// state needs (none when it is gone). It reads the state itself, under the
// node's lock, so that two applies racing (a sync and a node's activation)
// cannot leave the older state in place.
func (n *Node) apply(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.c.get(key)
	want := map[int32]*listener{}
	if n.active && s != nil {
		want = n.wanted(s)
	}
	for port, l := range n.listeners {
		if l.svc != key {
			continue
		}
		if w, ok := want[port]; ok && w.port == l.port && w.health == l.health {
			delete(want, port)
			continue
		}
		l.close()
		delete(n.listeners, port)
	}
	for port, w := range want {
		if o, taken := n.listeners[port]; taken {
			n.cfg.Logs.Write(LogService, "E can't open port %d for service %s: it is already open for %s", port, key, o.svc)
			continue
		}
		addr := net.JoinHostPort(n.cfg.Address.String(), strconv.Itoa(int(port)))
		ln, err := localports.Listen(addr)
		if err != nil {
			n.cfg.Logs.Write(LogService, "E can't open port %s for service %s: %v", addr, key, err)
			continue
		}
		w.ln = ln
		if w.health {
			w.srv = &http.Server{Handler: n.healthHandler(key), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second}
			go func() { _ = w.srv.Serve(ln) }()
		} else {
			go n.serve(w)
		}
		n.listeners[port] = w
	}
}

// wanted are the listeners a Service needs on this node; the caller holds
// n.mu.
func (n *Node) wanted(s *service) map[int32]*listener {
	out := map[int32]*listener{}
	if s.typ != "NodePort" && s.typ != "LoadBalancer" {
		return out
	}
	if err := n.lim.loadBalancer(s); err != nil {
		// The Windows data plane refused the Service's policy: its
		// NodePorts are not served here, and the node drops out of the
		// cloud load balancer as its probe fails.
		if !n.refused[s.key] {
			n.refused[s.key] = true
			n.cfg.Logs.Write(LogService, "E Policy creation failed for service %s: %v", s.key, err)
		}
		return out
	}
	if n.refused[s.key] {
		delete(n.refused, s.key)
		n.cfg.Logs.Write(LogService, "I Policy created for service %s (%d endpoints)", s.key, len(s.endpoints))
	}
	for _, p := range s.ports {
		if p.nodePort == 0 {
			continue
		}
		// A Service without endpoints for the port is REJECTed: the
		// connection is refused. With externalTrafficPolicy Local a node
		// without a local endpoint DROPs it instead (serve closes it).
		if !s.etpLocal && len(n.candidates(s, p.name, false)) == 0 {
			continue
		}
		out[p.nodePort] = &listener{svc: s.key, port: p.name}
	}
	if s.typ == "LoadBalancer" && s.etpLocal && s.healthCheckPort > 0 {
		out[s.healthCheckPort] = &listener{svc: s.key, health: true}
	}
	return out
}

// candidates are a Service port's ready endpoints; local ones only for
// externalTrafficPolicy (external) or internalTrafficPolicy Local.
func (n *Node) candidates(s *service, port string, local bool) []endpoint {
	var out []endpoint
	for _, e := range s.endpoints {
		if _, ok := e.ports[port]; !ok {
			continue
		}
		if local && e.node != n.cfg.NodeName {
			continue
		}
		out = append(out, e)
	}
	return out
}

func (n *Node) serve(l *listener) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go n.forward(conn, l)
	}
}

// forward carries a NodePort connection to an endpoint.
func (n *Node) forward(conn net.Conn, l *listener) {
	s := n.c.get(l.svc)
	if s == nil {
		reset(conn)
		return
	}
	up, err := n.dialEndpoint(s, l.port, s.etpLocal, clientIP(conn.RemoteAddr()))
	if err != nil {
		reset(conn)
		return
	}
	pipe(conn, up)
}

// dialEndpoint picks an endpoint of a Service port (ClientIP affinity
// first, else in turn) and connects to it.
func (n *Node) dialEndpoint(s *service, port string, local bool, client string) (net.Conn, error) {
	cands := n.candidates(s, port, local)
	if len(cands) == 0 && s.key == "default/kubernetes" {
		n.c.mu.RLock()
		api := n.c.apiServer
		n.c.mu.RUnlock()
		if api != "" {
			return net.DialTimeout("tcp", api, 5*time.Second)
		}
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("service %s has no ready endpoints%s", s.key, map[bool]string{true: " on node " + n.cfg.NodeName}[local])
	}
	e := n.pick(s, port, client, cands)
	host, err := n.c.address(e.addr)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(host.String(), strconv.Itoa(int(e.ports[port])))
	var c net.Conn
	for _, a := range localports.Candidates(addr) {
		if c, err = net.DialTimeout("tcp", a, 5*time.Second); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func (n *Node) pick(s *service, port, client string, cands []endpoint) endpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	aff := s.affinity > 0 && client != "" && n.lim.sessionAffinity()
	key := s.key + "/" + port + "/" + client
	// As iptables' recent match that kube-proxy uses, the timeout counts
	// from the client's last connection.
	now := n.now()
	if aff {
		if st, ok := n.sticky[key]; ok && now.Before(st.expires) {
			for _, e := range cands {
				if e.addr == st.addr {
					n.sticky[key] = stickyEntry{addr: e.addr, expires: now.Add(s.affinity)}
					return e
				}
			}
		}
		for k, st := range n.sticky {
			if now.After(st.expires) {
				delete(n.sticky, k)
			}
		}
	}
	rr := s.key + "/" + port
	i := n.next[rr] % len(cands)
	n.next[rr] = i + 1
	e := cands[i]
	if aff {
		n.sticky[key] = stickyEntry{addr: e.addr, expires: now.Add(s.affinity)}
	}
	return e
}

// healthHandler answers a Service's healthCheckNodePort as kube-proxy's
// service health server does: 200 with the count of the node's local
// endpoints, or 503 when it has none.
func (n *Node) healthHandler(key string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s := n.c.get(key)
		local := 0
		if s != nil {
			seen := map[string]bool{}
			for _, p := range s.ports {
				for _, e := range n.candidates(s, p.name, true) {
					seen[e.addr] = true
				}
			}
			local = len(seen)
		}
		ns, name, _ := strings.Cut(key, "/")
		body, _ := json.Marshal(map[string]any{
			"service":             map[string]string{"namespace": ns, "name": name},
			"localEndpoints":      local,
			"serviceProxyHealthy": true,
		})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(local))
		if local == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		} else {
			w.WriteHeader(http.StatusOK)
		}
		_, _ = w.Write(body)
	})
}

// ErrNoRoute is a Service IP the node cannot reach.
var ErrNoRoute = errors.New("no route to the Service IP from this node")

// DialService connects from the node itself to a Service's ClusterIP and
// port, as the node's processes do through kube-proxy's rules. handled is
// false when addr is no Service's ClusterIP.
func (n *Node) DialService(ctx context.Context, addr string) (conn net.Conn, handled bool, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, false, err
	}
	s, p := n.c.byClusterIP(host, int32(port))
	if s == nil {
		return nil, false, nil
	}
	n.mu.Lock()
	active := n.active
	n.mu.Unlock()
	if !active {
		// Nothing routes the Service range before kube-proxy runs: the
		// packets leave for the default gateway and are lost.
		return nil, true, fmt.Errorf("dial tcp %s: i/o timeout (kube-proxy has not run on node %s: nothing routes Service IPs)", addr, n.cfg.NodeName)
	}
	if err := n.lim.hostToService(); err != nil {
		return nil, true, fmt.Errorf("dial tcp %s: %w", addr, err)
	}
	if p == nil {
		return nil, true, fmt.Errorf("dial tcp %s: connect: connection refused (service %s has no port %d)", addr, s.key, port)
	}
	c, err := n.dialEndpoint(s, p.name, s.itpLocal, n.cfg.Address.String())
	if err != nil {
		return nil, true, fmt.Errorf("dial tcp %s: connect: connection refused (%v)", addr, err)
	}
	_ = ctx
	return c, true, nil
}

// DialOwnNodePort is the node reaching its own address at port. On Windows
// a NodePort of the node itself does not answer the node (the Kubernetes
// docs' Windows networking limitations: "Local NodePort access from the
// node itself"); handled is false for any other port or node.
func (n *Node) DialOwnNodePort(addr string) (handled bool, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil || !n.cfg.Windows || host != n.cfg.Address.String() {
		return false, nil
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return false, nil
	}
	n.mu.Lock()
	l, ok := n.listeners[int32(port)]
	n.mu.Unlock()
	if !ok || l.health {
		return false, nil
	}
	return true, fmt.Errorf("dial tcp %s: connect: connection timed out (a Windows node cannot reach its own NodePorts; other nodes and external clients can)", addr)
}

func clientIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	h, _, _ := net.SplitHostPort(a.String())
	return h
}

// reset closes a connection with a RST, as a refused or dropped flow ends
// for a client that already connected.
func reset(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.SetLinger(0)
	}
	_ = c.Close()
}

func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		_, _ = io.CopyBuffer(dst, src, buf)
		if t, ok := dst.(*net.TCPConn); ok {
			_ = t.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(b, a)
	cp(a, b)
	<-done
	_ = a.Close()
	_ = b.Close()
}
