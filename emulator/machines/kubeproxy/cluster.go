// Package kubeproxy simulates kube-proxy on the local world's nodes: from a
// cluster's Services and EndpointSlices, each node whose kube-proxy pod runs
// listens on its host address at the NodePorts of NodePort and LoadBalancer
// Services (and at spec.healthCheckNodePort for externalTrafficPolicy
// Local) and forwards each connection to a ready endpoint's pod host
// address. ClusterIPs are not addresses of this machine: the node's shells
// reach them through Node.DialService, as a node's own processes reach a
// Service through kube-proxy's rules.
//
// It carries connections, not packets: what iptables or HNS would do to a
// packet (REJECT a Service without endpoints, DROP at a node without a
// local endpoint) is done to the connection (no listener, or a connection
// closed at once).
//
// One Cluster watches a cluster's Services and EndpointSlices for all of
// its nodes, so a thousand nodes cost one pair of informers, not a
// thousand; a change is computed once per Service and only the listener
// sets of the nodes are touched per node.
package kubeproxy

import (
	"context"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
)

// defaultAffinityTimeout is sessionAffinityConfig.clientIP.timeoutSeconds'
// default (3 hours).
const defaultAffinityTimeout = 10800 * time.Second

// Cluster is what one cluster's nodes' proxies share: the Services and
// EndpointSlices as kube-proxy sees them.
type Cluster struct {
	podAddr func(podIP string) (netip.Addr, error)
	log     logr.Logger
	cancel  context.CancelFunc
	done    chan struct{}
	queue   workqueue.TypedRateLimitingInterface[string]

	svcLister   corelisters.ServiceLister
	sliceLister discoverylisters.EndpointSliceLister

	mu       sync.RWMutex
	services map[string]*service // by namespace/name
	nodes    map[*Node]struct{}
	// apiServer is where the kubernetes Service's traffic goes while it
	// has no endpoints (see SetAPIServer).
	apiServer string
}

// SetAPIServer names the cluster's API server endpoint (host:port). The
// local world's API servers advertise loopback addresses, which the API
// server refuses as the kubernetes Service's endpoints ("may not be in
// the loopback range"): on Azure they are the control-plane VMs' private
// addresses. So that what a real node reaches through the Service's
// ClusterIP is reached here too, the Service's traffic goes to the API
// server's load-balanced endpoint while it has no endpoints of its own.
func (c *Cluster) SetAPIServer(hostPort string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apiServer = hostPort
}

// service is one Service's state as kube-proxy programs it; a snapshot,
// replaced whole on every change, so connections read it without locks
// held for long.
type service struct {
	key             string
	namespace, name string
	typ             corev1.ServiceType
	clusterIPs      []string
	ports           []servicePort
	etpLocal        bool
	itpLocal        bool
	healthCheckPort int32
	affinity        time.Duration // 0: no ClientIP affinity
	endpoints       []endpoint
}

type servicePort struct {
	name     string
	port     int32
	nodePort int32
}

// endpoint is one ready address with its ports by port name.
type endpoint struct {
	addr  string
	node  string
	ports map[string]int32
}

// NewCluster starts watching a cluster's Services and EndpointSlices with
// client (kube-proxy's rights: list and watch both). podAddr maps a pod
// IP to where the local world serves it.
func NewCluster(client kubernetes.Interface, podAddr func(podIP string) (netip.Addr, error), log logr.Logger) *Cluster {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{
		podAddr: podAddr, log: log, cancel: cancel, done: make(chan struct{}),
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second)),
		services: map[string]*service{}, nodes: map[*Node]struct{}{},
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(crcache.TransformStripManagedFields()))
	svcs := factory.Core().V1().Services()
	slices := factory.Discovery().V1().EndpointSlices()
	c.svcLister, c.sliceLister = svcs.Lister(), slices.Lister()
	_, _ = svcs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueService, UpdateFunc: func(_, o any) { c.enqueueService(o) }, DeleteFunc: c.enqueueService,
	})
	_, _ = slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueSlice, UpdateFunc: func(_, o any) { c.enqueueSlice(o) }, DeleteFunc: c.enqueueSlice,
	})
	factory.Start(ctx.Done())
	go func() {
		defer close(c.done)
		if cache.WaitForCacheSync(ctx.Done(), svcs.Informer().HasSynced, slices.Informer().HasSynced) {
			go func() { <-ctx.Done(); c.queue.ShutDown() }()
			c.work()
		}
		c.queue.ShutDown()
		factory.Shutdown()
	}()
	return c
}

// Stop stops watching; the nodes' listeners close.
func (c *Cluster) Stop() {
	c.cancel()
	<-c.done
	c.mu.Lock()
	nodes := make([]*Node, 0, len(c.nodes))
	for n := range c.nodes {
		nodes = append(nodes, n)
	}
	c.mu.Unlock()
	for _, n := range nodes {
		n.Close()
	}
}

func (c *Cluster) enqueueService(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if s, ok := o.(*corev1.Service); ok {
		c.queue.Add(s.Namespace + "/" + s.Name)
	}
}

func (c *Cluster) enqueueSlice(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if s, ok := o.(*discoveryv1.EndpointSlice); ok {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			c.queue.Add(s.Namespace + "/" + name)
		}
	}
}

func (c *Cluster) work() {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		if err := c.sync(key); err != nil {
			c.log.V(1).Info("syncing service", "service", key, "error", err.Error())
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// sync rebuilds one Service's state and applies it to every node.
func (c *Cluster) sync(key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	var s *service
	svc, err := c.svcLister.Services(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
		slices, err := c.sliceLister.EndpointSlices(ns).List(sel)
		if err != nil {
			return err
		}
		s = build(svc, slices)
	}
	c.mu.Lock()
	if s == nil {
		delete(c.services, key)
	} else {
		c.services[key] = s
	}
	nodes := make([]*Node, 0, len(c.nodes))
	for n := range c.nodes {
		nodes = append(nodes, n)
	}
	c.mu.Unlock()
	for _, n := range nodes {
		n.apply(key)
	}
	return nil
}

// build is kube-proxy's view of a Service: its TCP ports and its ready
// endpoints (kube-proxy sends new connections to ready ones only).
func build(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) *service {
	s := &service{key: svc.Namespace + "/" + svc.Name, namespace: svc.Namespace, name: svc.Name, typ: svc.Spec.Type,
		etpLocal:        svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		itpLocal:        svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal,
		healthCheckPort: svc.Spec.HealthCheckNodePort,
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			s.clusterIPs = append(s.clusterIPs, ip)
		}
	}
	if len(s.clusterIPs) == 0 && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		s.clusterIPs = []string{svc.Spec.ClusterIP}
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		s.affinity = defaultAffinityTimeout
		if cfg := svc.Spec.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil {
			s.affinity = time.Duration(*cfg.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			s.ports = append(s.ports, servicePort{name: p.Name, port: p.Port, nodePort: p.NodePort})
		}
	}
	seen := map[string]int{}
	for _, sl := range slices {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		ports := map[string]int32{}
		for _, p := range sl.Ports {
			if p.Port == nil || (p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP) {
				continue
			}
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			ports[name] = *p.Port
		}
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			node := ""
			if e.NodeName != nil {
				node = *e.NodeName
			}
			for _, a := range e.Addresses {
				// Two slices may list one address while it moves.
				if i, ok := seen[a]; ok {
					for k, v := range ports {
						s.endpoints[i].ports[k] = v
					}
					continue
				}
				ep := endpoint{addr: a, node: node, ports: map[string]int32{}}
				for k, v := range ports {
					ep.ports[k] = v
				}
				seen[a] = len(s.endpoints)
				s.endpoints = append(s.endpoints, ep)
			}
		}
	}
	sort.Slice(s.endpoints, func(i, j int) bool { return s.endpoints[i].addr < s.endpoints[j].addr })
	return s
}

// get is a Service's current state.
func (c *Cluster) get(key string) *service {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.services[key]
}

// byClusterIP finds the Service serving ip:port.
func (c *Cluster) byClusterIP(ip string, port int32) (*service, *servicePort) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return servingIP(c.services, ip, port)
}

// servingIP finds, among services, the one serving ip:port; its port is
// nil when the Service has ip but not port.
func servingIP(services map[string]*service, ip string, port int32) (*service, *servicePort) {
	for _, s := range services {
		for _, cip := range s.clusterIPs {
			if cip != ip {
				continue
			}
			for i := range s.ports {
				if s.ports[i].port == port {
					return s, &s.ports[i]
				}
			}
			return s, nil
		}
	}
	return nil, nil
}

// attach adds a node and applies every known Service to it.
func (c *Cluster) attach(n *Node) {
	c.mu.Lock()
	c.nodes[n] = struct{}{}
	keys := make([]string, 0, len(c.services))
	for k := range c.services {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	for _, k := range keys {
		n.apply(k)
	}
}

func (c *Cluster) detach(n *Node) {
	c.mu.Lock()
	delete(c.nodes, n)
	c.mu.Unlock()
}

// address is where an endpoint is reached: a hostNetwork pod's address is
// its node's host address already; a pod IP has one of its own.
func (c *Cluster) address(ip string) (netip.Addr, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.Addr{}, err
	}
	if a.IsLoopback() || c.podAddr == nil {
		return a, nil
	}
	return c.podAddr(ip)
}
