package machines

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/proxy"
)

// kubeProxies are the clusters' shared Service views, by control-plane
// endpoint, with the count of nodes using each.
type kubeProxies struct {
	mu  sync.Mutex
	all map[string]*sharedProxy
}

type sharedProxy struct {
	c     *proxy.Cluster
	nodes int
}

// startProxy gives a node its kube-proxy, idle until the node runs a
// kube-proxy pod; nil when the runtime does not run the cluster's control
// plane (it then has no credentials to watch Services with).
func (r *Runtime) startProxy(m *machine, host netip.Addr, windows bool, kernel string) *proxy.Node {
	r.mu.Lock()
	wc := r.clusters[m.endpoint]
	r.mu.Unlock()
	if wc == nil {
		return nil
	}
	r.proxies.mu.Lock()
	defer r.proxies.mu.Unlock()
	sp := r.proxies.all[m.endpoint]
	if sp == nil {
		// Through the cluster's endpoint, as kube-proxy's kubeconfig
		// points, so the watch outlives any one control-plane machine.
		cfg := rest.CopyConfig(wc.admin)
		cfg.Host = "https://" + m.endpoint
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			r.event(m, "kube-proxy: "+err.Error())
			return nil
		}
		sp = &sharedProxy{c: proxy.NewCluster(client, r.podAddress(m.endpoint), r.opts.Log.WithName("kube-proxy").WithValues("endpoint", m.endpoint))}
		r.proxies.all[m.endpoint] = sp
	}
	sp.nodes++
	return sp.c.Node(proxy.NodeConfig{NodeName: m.nodeName, Address: host, Windows: windows, KernelVersion: kernel, Logs: m.logs})
}

// stopProxy closes the node's proxy; the last node of a cluster stops
// its watch.
func (r *Runtime) stopProxy(m *machine) {
	r.mu.Lock()
	n := m.proxy
	m.proxy = nil
	r.mu.Unlock()
	if n == nil {
		return
	}
	n.Close()
	r.proxies.mu.Lock()
	sp := r.proxies.all[m.endpoint]
	if sp != nil {
		sp.nodes--
		if sp.nodes <= 0 {
			delete(r.proxies.all, m.endpoint)
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
			if c, handled, err := pn.DialService(ctx, addr); handled {
				return c, err
			}
		}
		if a, ok := r.opts.Network.Lookup("pod/" + endpoint + "/" + ip.String()); ok {
			return hostnet.Dial(net.JoinHostPort(a.String(), port))
		}
		if a, ok := r.opts.Network.Lookup(ip.String()); ok {
			return hostnet.Dial(net.JoinHostPort(a.String(), port))
		}
		if ip.IsLoopback() {
			if pn != nil {
				if handled, err := pn.DialOwnNodePort(addr); handled {
					return nil, err
				}
			}
			return hostnet.Dial(addr)
		}
		return nil, fmt.Errorf("dial tcp %s: connect: connection timed out (no machine, pod or Service of this local world has that address)", addr)
	}
}
