package kubeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/localports"
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
	// HNSNetworkType is the type of the HNS network the node's CNI made
	// ("Overlay" for VXLAN, "L2Bridge" for host-gw), read when kube-proxy
	// starts, as kube-proxy reads it; nil or "" on Linux.
	HNSNetworkType func() string
	// PodRoute says why a connection from this node does not reach a pod
	// IP (nil when it does): a connection forwarded to another node's
	// pod needs the node's routes to it, as a DNATed packet leaves by the
	// node's routing table or HNS policies. Nil: every pod is reached.
	PodRoute func(podIP netip.Addr) error
	Logs     *vmdisk.Logs
}

// Node is one node's kube-proxy.
type Node struct {
	c   *Cluster
	cfg NodeConfig
	lim limits

	mu     sync.Mutex
	active bool
	closed bool
	// programmed is each Service as the node's kube-proxy last programmed
	// it: what the node's rules forward by, kept while no kube-proxy runs.
	programmed map[string]*service
	// listeners by port; each belongs to one Service.
	listeners map[int32]*listener
	// refused are the Services whose load-balancer policy the Windows
	// data plane refused (too many endpoints), logged once per refusal.
	refused map[string]bool
	// unrouted are the Services whose node ports take no connection
	// because the node has no route to any of their endpoints (wanted);
	// while there are some, recheck looks again every second.
	unrouted map[string]bool
	recheck  *time.Timer
	// noted are the notices logged once per Service (key/what).
	noted map[string]bool
	// sticky is ClientIP session affinity: service/port/client -> endpoint.
	sticky map[string]stickyEntry
	next   map[string]int
	// now is the affinity's clock.
	now func() time.Time
	// family is the one IP family (4 or 6) kube-proxy programs when it
	// fell back to single-stack; 0 when it programs both, -1 while a
	// Windows node's kube-proxy has not found its HNS network yet.
	family atomic.Int32
}

type stickyEntry struct {
	addr    string
	expires time.Time // zero: for as long as the policy (lb) lives
	lb      string
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
	n := &Node{c: c, cfg: cfg, lim: limitsOf(cfg), listeners: map[int32]*listener{}, programmed: map[string]*service{}, refused: map[string]bool{}, unrouted: map[string]bool{}, noted: map[string]bool{}, sticky: map[string]stickyEntry{}, next: map[string]int{}, now: time.Now}
	c.attach(n)
	return n
}

// SetActive says whether a kube-proxy runs on the node and programs its
// rules (its pod runs and has synced). While none runs, the rules stay as
// the last one programmed them and follow no change of Services or
// endpoints: kube-proxy removes its own mode's rules only when run with
// --cleanup (kubernetes cmd/kube-proxy/app/server.go at
// 15d02dd7dae5054723ada12f3767dff43aff7439, Options.Run; CleanupLeftovers
// in pkg/proxy/iptables/proxier.go at
// 092dddd12ca4cc5e66597de66a81fc77fdd3f29b), and the Windows proxier
// deletes HNS policies in a sync or at start (Started), never on exit
// (pkg/proxy/winkernel/proxier.go at
// f9cfe3cdd52e32d00b9eefa3c8e7dd06e08f355b), so a Service keeps working
// through a node while its kube-proxy pod is replaced. Only the health
// check node ports go: kube-proxy's own process serves them. A node whose
// kube-proxy never ran has no rules.
func (n *Node) SetActive(on bool) {
	n.mu.Lock()
	if n.closed || n.active == on {
		n.mu.Unlock()
		return
	}
	n.active = on
	stale := make([]string, 0, len(n.programmed))
	for k := range n.programmed {
		stale = append(stale, k)
	}
	n.mu.Unlock()
	if on {
		n.cfg.Logs.Write(LogService, "Using %s proxier on node %s (%s)", n.mode(), n.cfg.NodeName, n.cfg.Address)
		n.family.Store(-1)
		n.checkDualStack()
		n.c.attach(n)
		// A full sync also removes the rules of Services deleted while no
		// kube-proxy ran.
		for _, k := range stale {
			n.apply(k)
		}
		return
	}
	n.closeHealth()
}

// Started is a new kube-proxy process starting on the node, before its
// first sync. The Windows proxier deletes every HNS load-balancer policy
// of the node when it starts ("Cleaning up old HNS policy lists", in
// kubernetes' pkg/proxy/winkernel NewProxier and, in the current tree,
// NewBackend; the search index names no commit for those versions, and
// the 2018 proxier.go at f9cfe3cdd52e32d00b9eefa3c8e7dd06e08f355b does not
// do it yet), so until it has synced the node serves no Service; iptables
// rules stay until the first sync replaces them.
func (n *Node) Started() {
	n.mu.Lock()
	if !n.cfg.Windows || n.active || n.closed {
		n.mu.Unlock()
		return
	}
	n.programmed = map[string]*service{}
	n.mu.Unlock()
	n.closeAll()
}

// closeHealth closes the health check node ports, which die with the
// kube-proxy process that served them.
func (n *Node) closeHealth() {
	n.mu.Lock()
	var ls []*listener
	for port, l := range n.listeners {
		if l.health {
			ls = append(ls, l)
			delete(n.listeners, port)
		}
	}
	n.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

// checkDualStack is kube-proxy's start on Windows deciding whether it can
// run dual-stack: not on an overlay network (windows.go), where it runs
// one proxier of the node address's family. Until the CNI has made the
// HNS network the decision waits, as kube-proxy waits for the network.
func (n *Node) checkDualStack() {
	if !n.cfg.Windows || n.cfg.HNSNetworkType == nil {
		n.family.Store(0)
		return
	}
	typ := n.cfg.HNSNetworkType()
	switch {
	case typ == "":
		n.family.Store(-1)
		return
	case !strings.EqualFold(typ, hnsOverlay):
		n.family.Store(0)
		return
	}
	fam, name := int32(4), "IPv4"
	if n.cfg.Address.Is6() && !n.cfg.Address.Is4In6() {
		fam, name = 6, "IPv6"
	}
	if n.family.Swap(fam) != fam {
		n.cfg.Logs.Write(LogService, `I "Winoverlay does not support dual-stack, falling back to single-stack"`)
		n.cfg.Logs.Write(LogService, `I "kube-proxy running in single-stack mode" ipFamily=%q`, name)
	}
}

// programs says whether the node's kube-proxy programs addresses of ip's
// family.
func (n *Node) programs(ip string) bool {
	fam := n.family.Load()
	if fam < 0 {
		n.checkDualStack()
		fam = n.family.Load()
	}
	if fam <= 0 {
		return true
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	return (fam == 4) == a.Unmap().Is4()
}

// sees says whether kube-proxy's change tracker keeps the Service at all:
// a single-stack proxier skips one without a ClusterIP of its family.
func (n *Node) sees(s *service) bool {
	for _, ip := range s.clusterIPs {
		if n.programs(ip) {
			return true
		}
	}
	return false
}

// notice logs, once per Service, what kube-proxy on Windows logs when it
// programs a Service the node's build cannot fully serve; the caller
// holds n.mu.
func (n *Node) notice(key string, s *service) {
	if s == nil {
		for k := range n.noted {
			if strings.HasPrefix(k, key+"/") {
				delete(n.noted, k)
			}
		}
		return
	}
	if !n.cfg.Windows || !n.sees(s) {
		return
	}
	once := func(what, format string, args ...any) {
		if !n.noted[key+"/"+what] {
			n.noted[key+"/"+what] = true
			n.cfg.Logs.Write(LogService, format, args...)
		}
	}
	if s.affinity > 0 && !n.lim.sessionAffinity() {
		once("affinity", `I "Session Affinity is not supported on this version of Windows" service=%q`, key)
	}
	if s.etpLocal && !n.lim.localTraffic() {
		// winkernel logs its per-Service flags at verbosity 3.
		once("dsr", `I "Flags enabled for service" service=%q localTrafficDSR=false internalTrafficLocal=%t preserveDIP=false winProxyOptimization=true`, s.name, s.itpLocal)
	}
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
	n.programmed = map[string]*service{}
	if n.recheck != nil {
		n.recheck.Stop()
		n.recheck = nil
	}
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
// cannot leave the older state in place. While no kube-proxy runs it
// changes nothing (SetActive).
func (n *Node) apply(key string) {
	for {
		// The routes are weighed outside the lock (they ask the node's
		// network), for the state that is still current under it.
		s := n.c.get(key)
		routed := n.routed(s)
		n.mu.Lock()
		if !n.active {
			n.mu.Unlock()
			return
		}
		if n.c.get(key) != s {
			n.mu.Unlock()
			continue
		}
		if s != nil {
			n.programmed[key] = s
			n.notice(key, s)
		} else {
			delete(n.programmed, key)
			n.notice(key, nil)
		}
		n.listen(key, routed)
		n.mu.Unlock()
		return
	}
}

// reroute weighs the rules programmed for one Service against the node's
// routes again. Unlike apply it works while no kube-proxy runs: the
// rules stay, and the kernel routes each packet by what it has now.
func (n *Node) reroute(key string) {
	for {
		n.mu.Lock()
		s := n.programmed[key]
		n.mu.Unlock()
		routed := n.routed(s)
		n.mu.Lock()
		if n.programmed[key] != s {
			n.mu.Unlock()
			continue
		}
		if !n.closed {
			n.listen(key, routed)
		}
		n.mu.Unlock()
		return
	}
}

// listen opens and closes the node's listeners for one Service as its
// programmed rules and routed (of those rules) need; the caller holds
// n.mu.
func (n *Node) listen(key string, routed map[string]bool) {
	want := map[int32]*listener{}
	if s := n.programmed[key]; s != nil {
		want = n.wanted(s, routed)
	} else {
		delete(n.unrouted, key)
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
	n.scheduleRecheck()
}

// wanted are the listeners a Service needs on this node; the caller holds
// n.mu.
func (n *Node) wanted(s *service, routed map[string]bool) map[int32]*listener {
	out := map[int32]*listener{}
	unrouted := false
	delete(n.unrouted, s.key)
	if !servesNodePorts(s) || !n.sees(s) {
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
		// Without DSR a Windows node load-balances a Local Service's
		// NodePort over every endpoint, as for Cluster.
		if !(s.etpLocal && n.lim.localTraffic()) {
			if len(n.candidates(s, p.name, false)) == 0 {
				continue
			}
			// A NodePort is a DNAT (iptables, HNS), not a socket: the
			// handshake is the endpoint's, and a SYN DNATed to a pod the
			// node has no route to is lost. A node that can route to
			// none of the endpoints completes no connection, so the
			// cloud load balancer's TCP probe of the port fails there
			// (a node whose CNI agent has not programmed its routes
			// yet stays out of rotation) rather than taking connections
			// it can only reset. Closed, the port refuses where the
			// real one drops: either way the probe fails.
			if !routed[p.name] {
				unrouted = true
				continue
			}
		}
		out[p.nodePort] = &listener{svc: s.key, port: p.name}
	}
	if unrouted {
		n.unrouted[s.key] = true
	} else {
		delete(n.unrouted, s.key)
	}
	// The health check node port is kube-proxy's own server: it dies
	// with the process (closeHealth).
	if s.typ == "LoadBalancer" && s.etpLocal && s.healthCheckPort > 0 && n.active {
		out[s.healthCheckPort] = &listener{svc: s.key, health: true}
	}
	return out
}

func servesNodePorts(s *service) bool { return s.typ == "NodePort" || s.typ == "LoadBalancer" }

// routed says, per port of s that forwards to any endpoint, whether the
// node has a route to one of its endpoints. The caller does not hold
// n.mu: PodRoute asks the node's network.
func (n *Node) routed(s *service) map[string]bool {
	if s == nil || !servesNodePorts(s) {
		return nil
	}
	out := map[string]bool{}
	for _, p := range s.ports {
		if p.nodePort != 0 {
			out[p.name] = n.routesToAny(n.candidates(s, p.name, false))
		}
	}
	return out
}

// routesToAny says whether the node has a route to at least one of cands
// (a hostNetwork endpoint, or one of the node's own pods, needs none).
func (n *Node) routesToAny(cands []endpoint) bool {
	if n.cfg.PodRoute == nil {
		return true
	}
	for _, e := range cands {
		ip, err := netip.ParseAddr(e.addr)
		if err != nil || n.cfg.PodRoute(ip) == nil {
			return true
		}
	}
	return false
}

// scheduleRecheck looks at the Services held shut for want of routes
// again in a second, for as long as there are some: the routes come from
// the CNI agents of this node and the endpoints' nodes, and from the
// subnet's route table under host-gw, none of which kube-proxy hears
// about; a real node simply starts forwarding once the kernel has the
// route. The caller holds n.mu.
func (n *Node) scheduleRecheck() {
	if len(n.unrouted) == 0 || n.recheck != nil || n.closed {
		return
	}
	n.recheck = time.AfterFunc(time.Second, func() {
		n.mu.Lock()
		n.recheck = nil
		keys := slices.Collect(maps.Keys(n.unrouted))
		n.mu.Unlock()
		for _, k := range keys {
			n.reroute(k)
		}
	})
}

// Rerouted is the node's routes to other nodes' pods, or theirs to it,
// having changed (a CNI agent came into sync or left it): the node's
// NodePorts are weighed again against the routes, as the next SYN to
// each would be.
func (n *Node) Rerouted() {
	n.mu.Lock()
	var keys []string
	for k, s := range n.programmed {
		if servesNodePorts(s) {
			keys = append(keys, k)
		}
	}
	n.mu.Unlock()
	for _, k := range keys {
		n.reroute(k)
	}
}

// candidates are a Service port's ready endpoints; local ones only for
// externalTrafficPolicy (external) or internalTrafficPolicy Local.
func (n *Node) candidates(s *service, port string, local bool) []endpoint {
	var out []endpoint
	for _, e := range s.endpoints {
		if _, ok := e.ports[port]; !ok || !n.programs(e.addr) {
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
	s := n.rules(l.svc)
	if s == nil {
		hostnet.Reset(conn)
		return
	}
	up, err := n.dialEndpoint(s, l.port, s.etpLocal && n.lim.localTraffic(), clientIP(conn.RemoteAddr()))
	if err != nil {
		hostnet.Reset(conn)
		return
	}
	// The node's DNAT forwards until both sides close.
	hostnet.Splice(conn, up, 0)
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
	if n.cfg.PodRoute != nil {
		if ip, err := netip.ParseAddr(e.addr); err == nil {
			if err := n.cfg.PodRoute(ip); err != nil {
				return nil, &routeError{endpoint: e.addr, err: err}
			}
		}
	}
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
	// from the client's last connection. HNS has no timeout: the client
	// keeps its backend while the policy over the same endpoints lives.
	now := n.now()
	expires := func() time.Time {
		if n.lim.affinityExpires() {
			return now.Add(s.affinity)
		}
		return time.Time{}
	}
	lb := policyOf(cands)
	if aff {
		if st, ok := n.sticky[key]; ok && (n.lim.affinityExpires() || st.lb == lb) && (st.expires.IsZero() || now.Before(st.expires)) {
			for _, e := range cands {
				if e.addr == st.addr {
					n.sticky[key] = stickyEntry{addr: e.addr, expires: expires(), lb: lb}
					return e
				}
			}
		}
		for k, st := range n.sticky {
			if !st.expires.IsZero() && now.After(st.expires) || st.expires.IsZero() && strings.HasPrefix(k, s.key+"/"+port+"/") && st.lb != lb {
				delete(n.sticky, k)
			}
		}
	}
	rr := s.key + "/" + port
	i := n.next[rr] % len(cands)
	n.next[rr] = i + 1
	e := cands[i]
	if aff {
		n.sticky[key] = stickyEntry{addr: e.addr, expires: expires(), lb: lb}
	}
	return e
}

// policyOf names the load-balancer policy over a set of endpoints: HNS's
// affinity is the policy's, and kube-proxy replaces the policy when the
// endpoints change. On Linux the name changes too, but iptables' recent
// list outlives it, so an entry whose endpoint remains is kept there.
func policyOf(cands []endpoint) string {
	addrs := make([]string, len(cands))
	for i, e := range cands {
		addrs[i] = e.addr
	}
	return strings.Join(addrs, ",")
}

// healthHandler answers a Service's healthCheckNodePort as kube-proxy's
// service health server does: 200 with the count of the node's local
// endpoints, or 503 when it has none.
func (n *Node) healthHandler(key string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s := n.rules(key)
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

// routeError is a Service's endpoint the node has no route to: the
// connection to the ClusterIP is DNATed to it and then lost.
type routeError struct {
	endpoint string
	err      error
}

func (e *routeError) Error() string {
	return fmt.Sprintf("to endpoint %s: %v", e.endpoint, e.err)
}

func (e *routeError) Unwrap() error { return e.err }

// ErrNoRoute is a Service IP the node cannot reach.
var ErrNoRoute = errors.New("no route to the Service IP from this node")

// DialService connects from the node itself to a Service's ClusterIP and
// port, as the node's processes do through kube-proxy's rules. handled is
// false when addr is no Service's ClusterIP.
func (n *Node) DialService(ctx context.Context, addr string) (conn net.Conn, handled bool, err error) {
	return n.dialService(ctx, addr, "")
}

// DialServiceFromPod is DialService for a connection a pod of the node
// makes from its IP podIP: the node's rules DNAT it just the same, but
// the host's own limits (a Windows Server 2019 host reaching no VIP) do
// not apply to its pods, and ClientIP affinity keys on the pod's IP.
func (n *Node) DialServiceFromPod(ctx context.Context, addr, podIP string) (conn net.Conn, handled bool, err error) {
	return n.dialService(ctx, addr, podIP)
}

func (n *Node) dialService(ctx context.Context, addr, podIP string) (conn net.Conn, handled bool, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, false, err
	}
	cs, _ := n.c.byClusterIP(host, int32(port))
	if cs == nil {
		return nil, false, nil
	}
	s, p := n.byClusterIP(host, int32(port))
	if s == nil {
		if s, p, err = n.awaitRules(ctx, host, int32(port)); err != nil {
			return nil, true, fmt.Errorf("dial tcp %s: %w (no kube-proxy has programmed Service %s on node %s: nothing routes Service IPs it has not programmed)", addr, err, cs.key, n.cfg.NodeName)
		}
	}
	if podIP == "" {
		if err := n.lim.hostToService(); err != nil {
			return nil, true, fmt.Errorf("dial tcp %s: %w", addr, err)
		}
	}
	if !n.programs(host) {
		// The overlay node has no IPv6 address and kube-proxy programmed
		// no IPv6 policy (windows.go).
		return nil, true, fmt.Errorf("dial tcp %s: connect: network is unreachable (kube-proxy on Windows node %s runs single-stack on its overlay network: no policy for the Service's IPv6 address)", addr, n.cfg.NodeName)
	}
	if p == nil {
		return nil, true, fmt.Errorf("dial tcp %s: connect: connection refused (service %s has no port %d)", addr, s.key, port)
	}
	client := podIP
	if client == "" {
		client = n.cfg.Address.String()
	}
	c, err := n.dialEndpoint(s, p.name, s.itpLocal, client)
	var noRoute *routeError
	if errors.As(err, &noRoute) {
		return nil, true, fmt.Errorf("dial tcp %s: connect: %w", addr, noRoute)
	}
	if err != nil {
		return nil, true, fmt.Errorf("dial tcp %s: connect: connection refused (%v)", addr, err)
	}
	return c, true, nil
}

// awaitRules is a connect to a Service IP the node's rules do not forward
// yet: its SYN leaves for the default gateway and is lost, and the kernel
// sends it again on its schedule until the caller's deadline passes (i/o
// timeout, as Go's dialer says) or the kernel gives up (connection timed
// out). Whether a retransmission sent after kube-proxy programmed the
// Service is forwarded differs by data plane:
//   - Linux: no. netfilter decides a connection's NAT at its first packet
//     and keeps it (nf_nat_inet_fn in net/netfilter/nf_nat_core.c: a
//     connection whose NAT is initialized, a null binding when no rule
//     matched, is not looked up again; its comment names retransmissions),
//     so the retransmitted SYN follows the first one and is lost too: only
//     a new connect reaches the Service.
//   - Windows: yes. kube-proxy's load balancers are policies of the
//     Hyper-V switch's VFP extension, which caches a flow's actions with
//     the port's policy generation and reconciles a flow of an older
//     generation at its next packet (Firestone, "VFP: A Virtual Switch
//     Platform for Host SDN in the Public Cloud", NSDI 2017, its unified
//     flows' reconciliation; the paper describes Azure's hosts, and
//     that Windows Server's extension does the same is taken, not
//     documented): the connection is made at the first retransmission
//     after kube-proxy programmed the Service.
func (n *Node) awaitRules(ctx context.Context, host string, port int32) (*service, *servicePort, error) {
	start := time.Now()
	firstSYNLost()
	resend, giveUp := hostnet.SYNRetransmits(n.cfg.Windows)
	if !n.cfg.Windows {
		// No retransmission can connect: only the deadline or the
		// kernel's giving up ends the wait.
		resend = nil
	}
	for _, at := range append(resend, giveUp) {
		t := time.NewTimer(time.Until(start.Add(at)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, os.ErrDeadlineExceeded
		case <-t.C:
		}
		if at == giveUp {
			continue
		}
		if s, p := n.byClusterIP(host, port); s != nil {
			return s, p, nil
		}
	}
	return nil, nil, errors.New("connect: connection timed out")
}

// firstSYNLost is called when a connect's first SYN found no rules: a
// test's hook, to program the rules after it and not by the clock.
var firstSYNLost = func() {}

// rules is a Service as the node's rules forward it (nil: none).
func (n *Node) rules(key string) *service {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.programmed[key]
}

// byClusterIP finds the programmed Service serving ip:port.
func (n *Node) byClusterIP(ip string, port int32) (*service, *servicePort) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return servingIP(n.programmed, ip, port)
}

// DialOwnNodePort is the node reaching its own host address at port (addr;
// dialed is the address the node's program asked for, its VNet address or
// the host address). On Windows a NodePort of the node itself does not
// answer the node (the Kubernetes docs' Windows networking limitations:
// "Local NodePort access from the node itself (works for other nodes or
// external clients)", windows-networking.md at kubernetes/website
// 038a69be0aae7dacdbdd60d7398880b5babbf343, with no build that lifts it);
// handled is false for any other port or node. The docs name no error: a
// timeout is this emulator's choice.
func (n *Node) DialOwnNodePort(addr, dialed string) (handled bool, err error) {
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
	return true, fmt.Errorf("dial tcp %s: connect: connection timed out (a Windows node cannot reach its own NodePorts; other nodes and external clients can)", dialed)
}

func clientIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	h, _, _ := net.SplitHostPort(a.String())
	return h
}
