package machines

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/kubeproxy"
)

// kubeProxies are the clusters' shared Service views, by control-plane
// endpoint, with the count of nodes using each.
type kubeProxies struct {
	mu  sync.Mutex
	all map[string]*sharedProxy
}

type sharedProxy struct {
	c     *kubeproxy.Cluster
	nodes int
}

// ensureProxy gives a node its kube-proxy, idle until the node runs a
// kube-proxy pod, once the runtime knows the node's cluster (it runs its
// control plane, whose credentials watch Services); until then the node
// has none, as a node whose kube-proxy cannot reach the API server
// programs nothing.
func (r *Runtime) ensureProxy(m *machine) {
	r.mu.Lock()
	wc, cfg := r.clusters[m.endpoint], m.proxyNode
	if wc == nil || cfg == nil || m.proxy != nil {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.proxies.mu.Lock()
	sp := r.proxies.all[m.endpoint]
	if sp == nil {
		// Through the cluster's endpoint, as kube-proxy's kubeconfig
		// points, so the watch outlives any one control-plane machine; in
		// protobuf, kube-proxy's default content type
		// (pkg/proxy/apis/config/v1alpha1/defaults.go, kubernetes v1.36.3).
		pc := wc.viaEndpoint(m.endpoint)
		pc.ContentType = runtime.ContentTypeProtobuf
		client, err := kubernetes.NewForConfig(pc)
		if err != nil {
			r.proxies.mu.Unlock()
			r.event(m, "kube-proxy: "+err.Error())
			return
		}
		sp = &sharedProxy{c: kubeproxy.NewCluster(client, r.podAddress(m.endpoint), r.opts.Log.WithName("kube-proxy").WithValues("endpoint", m.endpoint))}
		sp.c.SetAPIServer(m.endpoint)
		r.proxies.all[m.endpoint] = sp
	}
	sp.nodes++
	nc := *cfg
	// What kube-proxy forwards to a pod leaves this node as the node's own
	// packets do: through the node's routes to the pod.
	nc.PodRoute = func(ip netip.Addr) error { return r.podRoute(m, ip) }
	pn := sp.c.Node(nc)
	r.proxies.mu.Unlock()
	r.mu.Lock()
	if m.proxy != nil || m.proxyNode == nil {
		// Another call won, or the machine stopped meanwhile.
		r.mu.Unlock()
		r.closeProxy(m.endpoint, pn)
		return
	}
	m.proxy = pn
	active := m.installed["kube-proxy"]
	r.mu.Unlock()
	pn.SetActive(active && r.proxySynced(m))
}

// setInstalled records what the node's pods installed and tells its
// kube-proxy whether it runs.
func (r *Runtime) setInstalled(m *machine, what map[string]bool) {
	r.mu.Lock()
	started := what["kube-proxy"] && !m.installed["kube-proxy"]
	m.installed = what
	pn := m.proxy
	r.mu.Unlock()
	if pn == nil {
		r.ensureProxy(m)
		return
	}
	if started {
		pn.Started()
	}
	pn.SetActive(what["kube-proxy"] && r.proxySynced(m))
}

// stopProxy closes the node's proxy; the last node of a cluster stops
// its watch.
func (r *Runtime) stopProxy(m *machine) {
	r.mu.Lock()
	n := m.proxy
	m.proxy, m.proxyNode, m.installed = nil, nil, nil
	r.mu.Unlock()
	if n != nil {
		r.closeProxy(m.endpoint, n)
	}
}

func (r *Runtime) closeProxy(endpoint string, n *kubeproxy.Node) {
	n.Close()
	r.proxies.mu.Lock()
	sp := r.proxies.all[endpoint]
	if sp != nil {
		sp.nodes--
		if sp.nodes <= 0 {
			delete(r.proxies.all, endpoint)
		}
	}
	r.proxies.mu.Unlock()
	if sp != nil && sp.nodes <= 0 {
		sp.c.Stop()
	}
}

// nodeDial connects from the machine itself, as its shell's curl does: a
// Service's ClusterIP through the node's kube-proxy, a pod IP of its
// cluster, another machine's VNet address, or a loopback address of the
// local world (node addresses as kubectl shows them, public IPs).
func (r *Runtime) nodeDial(m *machine) func(ctx context.Context, addr string) (net.Conn, error) {
	return r.dialFrom(m, "")
}

// podDial connects from a pod of machine m whose IP is podIP, as its
// packets go: a Service's ClusterIP through the node's kube-proxy rules
// (DNAT from the pod's IP), another node's pod through the CNI's routes,
// the pod's own loopback to nothing (no process runs in a simulated
// container), anything else as the node forwards it. A host-network pod
// (podIP "") is the node itself.
func (r *Runtime) podDial(m *machine) func(podIP string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(podIP string) func(ctx context.Context, addr string) (net.Conn, error) {
		return r.dialFrom(m, podIP)
	}
}

func (r *Runtime) dialFrom(m *machine, podIP string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("dial tcp %s: %w", addr, err)
		}
		r.mu.Lock()
		pn, endpoint := m.proxy, m.endpoint
		r.mu.Unlock()
		if pn != nil {
			dial := pn.DialService
			if podIP != "" {
				dial = func(ctx context.Context, addr string) (net.Conn, bool, error) {
					return pn.DialServiceFromPod(ctx, addr, podIP)
				}
			}
			if c, handled, err := dial(ctx, addr); handled {
				return c, err
			}
		}
		if podIP != "" && ip.IsLoopback() {
			return nil, fmt.Errorf("dial tcp %s: connect: connection refused (nothing listens in the pod: no process runs in a simulated container)", addr)
		}
		if a, ok := r.opts.Network.Lookup("pod/" + endpoint + "/" + ip.String()); ok {
			if err := r.podRoute(m, ip); err != nil {
				return nil, fmt.Errorf("dial tcp %s: connect: %w", addr, err)
			}
			return hostnet.Dial(net.JoinHostPort(a.String(), port))
		}
		if a, ok := r.opts.Network.Lookup(ip.String()); ok {
			// The node's own VNet address is where its NodePorts are
			// reached from outside; a Windows node cannot reach them.
			if pn != nil {
				if handled, err := pn.DialOwnNodePort(net.JoinHostPort(a.String(), port), addr); handled {
					return nil, err
				}
			}
			return hostnet.Dial(net.JoinHostPort(a.String(), port))
		}
		if ip.IsLoopback() {
			if pn != nil {
				if handled, err := pn.DialOwnNodePort(addr, addr); handled {
					return nil, err
				}
			}
			return hostnet.Dial(addr)
		}
		return nil, fmt.Errorf("dial tcp %s: connect: connection timed out (no machine, pod or Service of this local world has that address)", addr)
	}
}
