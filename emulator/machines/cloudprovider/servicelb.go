package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// What cloud-provider-azure reads from a Service and a Node, and writes on
// Azure's resources.
const (
	InternalAnnotation       = "service.beta.kubernetes.io/azure-load-balancer-internal"
	InternalSubnetAnnotation = "service.beta.kubernetes.io/azure-load-balancer-internal-subnet"
	// ExcludeLabel is kubeadm's label on control-plane nodes; the service
	// controller leaves nodes carrying it (unless "false") out.
	ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"
	// ManagedLabel "false" marks a node the cloud provider does not manage.
	ManagedLabel = "kubernetes.azure.com/managed"
	// ResourceGroupLabel names the resource group of a node outside the
	// cloud config's; such nodes stay out of its load balancers.
	ResourceGroupLabel = "kubernetes.azure.com/resource-group"
	// ToBeDeletedTaint is the cluster autoscaler's taint on a node it is
	// removing.
	ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"
	serviceTag       = "k8s-azure-service"
	clusterTag       = "k8s-azure-cluster-name"
	// Probe defaults of cloud-provider-azure (interval 5 s, 2 probes) and
	// kube-proxy's health check path.
	probeInterval  = 5
	probeThreshold = 2
	healthzPath    = "/healthz"
	// idleTimeout is Azure's default TCP idle timeout, in minutes.
	idleTimeout = 4
	// maxPIPName is Azure's limit on a public IP's name, less the room
	// cloud-provider-azure keeps for an IP-family suffix.
	maxPIPName = 80 - 5
)

// frontendName is cloud-provider-azure's name for a Service's frontend IP
// configuration and the prefix of its rules and probes: "a" and the UID
// without dashes, at most 32 characters (Kubernetes' default load balancer
// name).
func frontendName(s *corev1.Service) string {
	n := "a" + strings.ReplaceAll(string(s.UID), "-", "")
	if len(n) > 32 {
		n = n[:32]
	}
	return n
}

// publicIPName is <cluster name>-<frontend name>.
func publicIPName(cluster string, s *corev1.Service) string {
	n := cluster + "-" + frontendName(s)
	if len(n) > maxPIPName {
		n = n[:maxPIPName]
	}
	return n
}

// ruleName is <frontend name>-<Kubernetes protocol>-<port>; a probe on the
// same port shares it.
func ruleName(s *corev1.Service, proto corev1.Protocol, port int32) string {
	return frontendName(s) + "-" + string(proto) + "-" + strconv.Itoa(int(port))
}

func internal(s *corev1.Service) bool {
	v, err := strconv.ParseBool(s.Annotations[InternalAnnotation])
	return err == nil && v
}

// wanted is a Service's part of a load balancer.
type wanted struct {
	frontend Frontend
	probes   []Probe
	rules    []Rule
}

// specError is a Service the cloud provider cannot program as it is; the
// message says what to change.
type specError struct{ msg string }

func (e *specError) Error() string { return e.msg }

// build is what cloud-provider-azure puts on the load balancer for a
// Service: per port a rule, and a probe: with externalTrafficPolicy Local
// one HTTP probe of kube-proxy's health check node port for every rule,
// else a TCP probe of each TCP port's node port (UDP rules go without).
//
// Every rule has floating IP off and forwards to the node port, as
// cloud-provider-azure does for a Service annotated
// azure-disable-load-balancer-floating-ip: the local world's load balancer
// carries connections, not packets, so a node cannot see which frontend
// address a connection was sent to, which floating IP relies on.
func build(s *corev1.Service, st Settings, frontend Frontend) (wanted, error) {
	w := wanted{frontend: frontend}
	if err := unsupported(s); err != nil {
		return w, err
	}
	pool := st.ClusterName
	var shared *Probe
	if s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		if s.Spec.HealthCheckNodePort == 0 {
			return w, &specError{"externalTrafficPolicy is Local but spec.healthCheckNodePort is not allocated yet"}
		}
		shared = &Probe{Name: ruleName(s, corev1.ProtocolTCP, s.Spec.HealthCheckNodePort), Protocol: "Http", Path: healthzPath,
			Port: s.Spec.HealthCheckNodePort, Interval: probeInterval, Threshold: probeThreshold}
		w.probes = append(w.probes, *shared)
	}
	dist := "Default"
	if s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		dist = "SourceIP"
	}
	for _, p := range s.Spec.Ports {
		var proto string
		switch p.Protocol {
		case corev1.ProtocolTCP, "":
			proto = "Tcp"
		case corev1.ProtocolUDP:
			proto = "Udp"
		default:
			return w, &specError{fmt.Sprintf("port %d: %s is only supported on a Standard internal load balancer, which the local world does not simulate; use TCP or UDP", p.Port, p.Protocol)}
		}
		if p.NodePort == 0 {
			return w, &specError{fmt.Sprintf("port %d has no node port, which its load-balancing rule forwards to: remove spec.allocateLoadBalancerNodePorts: false", p.Port)}
		}
		kp := p.Protocol
		if kp == "" {
			kp = corev1.ProtocolTCP
		}
		r := Rule{Name: ruleName(s, kp, p.Port), Frontend: frontend.Name, Pool: pool, Protocol: proto,
			FrontendPort: p.Port, BackendPort: p.NodePort, FloatingIP: false, TCPReset: proto == "Tcp",
			DisableOutboundSNAT: st.Config.DisableOutboundSNAT, LoadDistribution: dist, IdleTimeoutMinutes: idleTimeout}
		switch {
		case shared != nil:
			r.Probe = shared.Name
		case proto == "Tcp":
			pr := Probe{Name: r.Name, Protocol: "Tcp", Port: p.NodePort, Interval: probeInterval, Threshold: probeThreshold}
			w.probes = append(w.probes, pr)
			r.Probe = pr.Name
		}
		w.rules = append(w.rules, r)
	}
	return w, nil
}

// Annotations and fields that pin a Service to an address the user made:
// cloud-provider-azure looks the public IP up and fails when it is not
// there. The simulation does not look them up, so it refuses them rather
// than hand out another address.
var pinning = []string{
	"service.beta.kubernetes.io/azure-pip-name",
	"service.beta.kubernetes.io/azure-load-balancer-ipv4",
	"service.beta.kubernetes.io/azure-load-balancer-ipv6",
	"service.beta.kubernetes.io/azure-pip-prefix-id",
}

// unsupported is what a Service asks for that the simulation does not do,
// with what to change.
func unsupported(s *corev1.Service) error {
	if s.Spec.LoadBalancerIP != "" {
		return &specError{fmt.Sprintf("spec.loadBalancerIP %s: the local world's cloud-controller-manager does not look up public IPs you made; remove it to get an address of its own", s.Spec.LoadBalancerIP)}
	}
	for _, a := range pinning {
		if v, ok := s.Annotations[a]; ok {
			return &specError{fmt.Sprintf("annotation %s=%s: the local world's cloud-controller-manager does not look up public IPs you made; remove it to get an address of its own", a, v)}
		}
	}
	for _, f := range s.Spec.IPFamilies {
		if f == corev1.IPv6Protocol {
			return &specError{"spec.ipFamilies includes IPv6: the local world simulates IPv4 load balancers only; use ipFamilyPolicy SingleStack with IPv4"}
		}
	}
	return nil
}

// owned says whether a part of the load balancer is the Service's: its
// frontend, and the rules and probes named after it.
func owned(fe, name string) bool {
	return strings.EqualFold(name, fe) || strings.HasPrefix(strings.ToLower(name), strings.ToLower(fe)+"-")
}

// strip removes a Service's parts from lb and says whether there were any.
func strip(lb *LoadBalancer, fe string) bool {
	n := len(lb.Frontends) + len(lb.Probes) + len(lb.Rules)
	lb.Frontends = slices.DeleteFunc(lb.Frontends, func(f Frontend) bool { return owned(fe, f.Name) })
	lb.Probes = slices.DeleteFunc(lb.Probes, func(p Probe) bool { return owned(fe, p.Name) })
	lb.Rules = slices.DeleteFunc(lb.Rules, func(r Rule) bool { return owned(fe, r.Name) })
	return n != len(lb.Frontends)+len(lb.Probes)+len(lb.Rules)
}

// backends are the nodes the service controller puts behind its load
// balancers, as Kubernetes' service controller and cloud-provider-azure
// choose them: not being deleted, not labelled for exclusion, not tainted
// by the cluster autoscaler for removal, managed by the cloud provider, in
// the cloud config's resource group, not control-plane nodes (an IP-based
// pool leaves them out), and with an IPv4 InternalIP. Their address is the
// node's VNet address.
func (c *Controller) backends(st Settings) []PoolAddress {
	var out []PoolAddress
	for _, o := range c.nodes.List() {
		n := o.(*corev1.Node)
		if n.DeletionTimestamp != nil || !included(n) || isControlPlane(n) {
			continue
		}
		if v, ok := n.Labels[ManagedLabel]; ok && strings.EqualFold(v, "false") {
			continue
		}
		if rg, ok := n.Labels[ResourceGroupLabel]; ok && rg != "" && !strings.EqualFold(rg, st.Config.ResourceGroup) {
			continue
		}
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ToBeDeletedTaint }) {
			continue
		}
		ip := ""
		for _, a := range n.Status.Addresses {
			if addr, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP && addr.Is4() {
				ip = a.Address
				break
			}
		}
		if ip == "" {
			continue
		}
		if c.cfg.PrivateIP != nil {
			p, ok := c.cfg.PrivateIP(ip)
			if !ok {
				continue
			}
			ip = p
		}
		out = append(out, PoolAddress{Name: n.Name, IP: ip})
	}
	slices.SortFunc(out, func(a, b PoolAddress) int { return strings.Compare(a.IP, b.IP) })
	return out
}

func included(n *corev1.Node) bool {
	v, ok := n.Labels[ExcludeLabel]
	if !ok {
		return true
	}
	b, err := strconv.ParseBool(v)
	return err == nil && !b
}

func isControlPlane(n *corev1.Node) bool {
	_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
	_, master := n.Labels["node-role.kubernetes.io/master"]
	return cp || master || n.Labels["kubernetes.io/role"] == "master"
}

// setPool makes the cluster's backend pool hold addrs.
func setPool(lb *LoadBalancer, st Settings, addrs []PoolAddress) {
	for i := range lb.Pools {
		if strings.EqualFold(lb.Pools[i].Name, st.ClusterName) {
			lb.Pools[i].VNetID, lb.Pools[i].Addresses = st.vnetID(), addrs
			return
		}
	}
	lb.Pools = append(lb.Pools, Pool{Name: st.ClusterName, VNetID: st.vnetID(), Addresses: addrs})
}

// same compares two load balancers regardless of the order of their parts.
func same(a, b *LoadBalancer) bool {
	norm := func(lb *LoadBalancer) LoadBalancer {
		n := *lb
		n.Frontends = slices.Clone(lb.Frontends)
		n.Probes = slices.Clone(lb.Probes)
		n.Rules = slices.Clone(lb.Rules)
		n.Pools = nil
		for _, p := range lb.Pools {
			p.Addresses = slices.Clone(p.Addresses)
			slices.SortFunc(p.Addresses, func(x, y PoolAddress) int { return strings.Compare(x.IP, y.IP) })
			if len(p.Addresses) == 0 {
				p.Addresses = nil
			}
			n.Pools = append(n.Pools, p)
		}
		slices.SortFunc(n.Frontends, func(x, y Frontend) int { return strings.Compare(x.Name, y.Name) })
		slices.SortFunc(n.Probes, func(x, y Probe) int { return strings.Compare(x.Name, y.Name) })
		slices.SortFunc(n.Rules, func(x, y Rule) int { return strings.Compare(x.Name, y.Name) })
		slices.SortFunc(n.Pools, func(x, y Pool) int { return strings.Compare(x.Name, y.Name) })
		return n
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func clone(lb *LoadBalancer) *LoadBalancer {
	c := *lb
	c.Frontends, c.Probes, c.Rules = slices.Clone(lb.Frontends), slices.Clone(lb.Probes), slices.Clone(lb.Rules)
	c.Pools = nil
	for _, p := range lb.Pools {
		p.Addresses = slices.Clone(p.Addresses)
		c.Pools = append(c.Pools, p)
	}
	return &c
}

// removeFrom takes a Service's parts off a load balancer, deleting the load
// balancer when no frontend is left, as cloud-provider-azure does.
func (c *Controller) removeFrom(ctx context.Context, st Settings, ref Ref, fe string) (bool, error) {
	lb, err := st.net.LoadBalancer(ctx, ref)
	if err != nil || lb == nil {
		return false, err
	}
	if !strip(lb, fe) {
		return false, nil
	}
	if len(lb.Frontends) == 0 {
		return true, st.net.DeleteLoadBalancer(ctx, ref)
	}
	return true, st.net.PutLoadBalancer(ctx, lb)
}

// syncService is the service controller's work for one Service. Every step
// is idempotent and ordered so that a crash at any point leaves nothing
// behind: the finalizer goes on before anything is created in Azure and
// comes off after everything is gone; a public IP is created before the
// frontend that uses it and deleted after the frontend is.
func (c *Controller) syncService(ctx context.Context, key string) error {
	o, ok, _ := c.svcs.GetByKey(key)
	if !ok {
		delete(c.warned, key)
		return nil
	}
	pod, ct := c.activeCCM()
	if pod == nil {
		// Nothing programs Azure's load balancers: the Service stays
		// <pending>, and a deleted one keeps its finalizer until a
		// cloud-controller-manager runs again.
		return nil
	}
	s := o.(*corev1.Service).DeepCopy()
	// A Service with a loadBalancerClass is another implementation's.
	wants := s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.LoadBalancerClass == nil && s.DeletionTimestamp == nil
	if !wants && !hasFinalizer(s) {
		return nil
	}
	st, err := settings(pod, ct, c.cfg.ReadNodeFile)
	if err == nil && !st.runsServiceController() {
		return nil
	}
	if err == nil {
		if p := st.problem(); p != "" {
			err = &specError{p}
		}
	}
	if err == nil {
		err = c.connect(&st)
	}
	if err != nil {
		c.warn(ctx, s, key, "SyncLoadBalancerFailed", "Error syncing load balancer: "+err.Error())
		return err
	}
	if !wants {
		return c.deleteLB(ctx, s, key, st)
	}
	if !hasFinalizer(s) {
		return c.setFinalizer(ctx, s, true) // requeued by the update
	}
	err = c.ensureLB(ctx, s, st)
	if err != nil {
		c.warn(ctx, s, key, "SyncLoadBalancerFailed", "Error syncing load balancer: "+err.Error())
		if se := (*specError)(nil); errors.As(err, &se) {
			return nil // a change of the Service requeues it
		}
		return err
	}
	delete(c.warned, key)
	return nil
}

func (c *Controller) ensureLB(ctx context.Context, s *corev1.Service, st Settings) error {
	fe := frontendName(s)
	in := internal(s)
	pipRef := Ref{SubscriptionID: st.Config.SubscriptionID, ResourceGroup: st.Config.ResourceGroup, Name: publicIPName(st.ClusterName, s)}
	frontend := Frontend{Name: fe}
	if in {
		subnet := st.Config.SubnetName
		if v := s.Annotations[InternalSubnetAnnotation]; v != "" {
			subnet = v
		}
		if subnet == "" {
			return &specError{fmt.Sprintf("an internal load balancer needs a subnet: annotate the Service %s or set subnetName in %s", InternalSubnetAnnotation, st.ConfigPath)}
		}
		frontend.SubnetID = st.vnetID() + "/subnets/" + subnet
	}
	if _, err := build(s, st, frontend); err != nil {
		return err
	}
	// A Service that switched between public and internal leaves the
	// other load balancer (and its public IP) first.
	moved, err := c.removeFrom(ctx, st, st.lbRef(!in), fe)
	if err != nil {
		return err
	}
	if in {
		if err := st.net.DeletePublicIP(ctx, pipRef); err != nil {
			return err
		}
	}
	address := ""
	if !in {
		id, addr, err := st.net.EnsurePublicIP(ctx, pipRef, st.Config.Location,
			map[string]string{serviceTag: s.Namespace + "/" + s.Name, clusterTag: st.ClusterName})
		if err != nil {
			return err
		}
		frontend.PublicIPID, address = id, addr
	}
	ref := st.lbRef(in)
	cur, err := st.net.LoadBalancer(ctx, ref)
	if err != nil {
		return err
	}
	if cur == nil {
		cur = &LoadBalancer{Ref: ref, Location: st.Config.Location}
	}
	want := clone(cur)
	if in {
		// Azure assigns the private address: keep it.
		for _, f := range cur.Frontends {
			if strings.EqualFold(f.Name, fe) && strings.EqualFold(f.SubnetID, frontend.SubnetID) {
				frontend.PrivateIP = f.PrivateIP
			}
		}
	}
	w, err := build(s, st, frontend)
	if err != nil {
		return err
	}
	strip(want, fe)
	want.Frontends = append(want.Frontends, w.frontend)
	want.Probes = append(want.Probes, w.probes...)
	want.Rules = append(want.Rules, w.rules...)
	backends := c.backends(st)
	setPool(want, st, backends)
	changed := moved || !same(cur, want)
	if changed {
		_ = c.event(ctx, s, corev1.EventTypeNormal, "EnsuringLoadBalancer", "Ensuring load balancer")
		if len(backends) == 0 {
			_ = c.event(ctx, s, corev1.EventTypeWarning, "UnAvailableLoadBalancer", "There are no available nodes for LoadBalancer")
		}
		if err := st.net.PutLoadBalancer(ctx, want); err != nil {
			return err
		}
	}
	// Then its NSG rules, as cloud-provider-azure's reconcileService does
	// after the load balancer (reconcileSecurityGroup).
	nsgChanged, err := c.reconcileNSG(ctx, s, st, backends, true)
	if err != nil {
		return err
	}
	changed = changed || nsgChanged
	if in {
		lb, err := st.net.LoadBalancer(ctx, ref)
		if err != nil {
			return err
		}
		for _, f := range lbFrontends(lb) {
			if strings.EqualFold(f.Name, fe) {
				address = f.PrivateIP
			}
		}
		if address == "" {
			return fmt.Errorf("frontend %s of load balancer %s has no private address", fe, ref.Name)
		}
	}
	ingress := []corev1.LoadBalancerIngress{{IP: address, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	if !reflect.DeepEqual(s.Status.LoadBalancer.Ingress, ingress) {
		s.Status.LoadBalancer.Ingress = ingress
		if _, err := c.cfg.Client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
		changed = true
	}
	if changed {
		_ = c.event(ctx, s, corev1.EventTypeNormal, "EnsuredLoadBalancer", "Ensured load balancer")
	}
	return nil
}

func lbFrontends(lb *LoadBalancer) []Frontend {
	if lb == nil {
		return nil
	}
	return lb.Frontends
}

func (c *Controller) deleteLB(ctx context.Context, s *corev1.Service, key string, st Settings) error {
	_ = c.event(ctx, s, corev1.EventTypeNormal, "DeletingLoadBalancer", "Deleting load balancer")
	fe := frontendName(s)
	// The Service's NSG rules go first (EnsureLoadBalancerDeleted).
	if _, err := c.reconcileNSG(ctx, s, st, c.backends(st), false); err != nil {
		c.warn(ctx, s, key, "DeleteLoadBalancerFailed", "Error deleting load balancer: "+err.Error())
		return err
	}
	for _, in := range []bool{false, true} {
		if _, err := c.removeFrom(ctx, st, st.lbRef(in), fe); err != nil {
			c.warn(ctx, s, key, "DeleteLoadBalancerFailed", "Error deleting load balancer: "+err.Error())
			return err
		}
	}
	if err := st.net.DeletePublicIP(ctx, Ref{SubscriptionID: st.Config.SubscriptionID, ResourceGroup: st.Config.ResourceGroup, Name: publicIPName(st.ClusterName, s)}); err != nil {
		c.warn(ctx, s, key, "DeleteLoadBalancerFailed", "Error deleting load balancer: "+err.Error())
		return err
	}
	if s.DeletionTimestamp == nil && len(s.Status.LoadBalancer.Ingress) > 0 {
		s.Status.LoadBalancer = corev1.LoadBalancerStatus{}
		if _, err := c.cfg.Client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if err := c.setFinalizer(ctx, s, false); err != nil {
		return err
	}
	delete(c.warned, key)
	_ = c.event(ctx, s, corev1.EventTypeNormal, "DeletedLoadBalancer", "Deleted load balancer")
	return nil
}

// syncPools keeps the backend pool of the cluster's load balancers in step
// with the nodes, as the service controller does when nodes come and go.
func (c *Controller) syncPools(ctx context.Context) error {
	pod, ct := c.activeCCM()
	if pod == nil {
		return nil
	}
	// Only the Services this controller programmed (they carry its
	// finalizer) have load balancers whose pools follow the nodes; with
	// none, nodes joining by the hundred cost Azure no calls.
	if !slices.ContainsFunc(c.svcs.List(), func(o any) bool { return hasFinalizer(o.(*corev1.Service)) }) {
		return nil
	}
	st, err := settings(pod, ct, c.cfg.ReadNodeFile)
	if err != nil || !st.runsServiceController() || st.problem() != "" || c.connect(&st) != nil {
		return nil // the Services say why
	}
	backends := c.backends(st)
	for _, in := range []bool{false, true} {
		ref := st.lbRef(in)
		cur, err := st.net.LoadBalancer(ctx, ref)
		if err != nil {
			return err
		}
		if cur == nil {
			continue
		}
		want := clone(cur)
		setPool(want, st, backends)
		if same(cur, want) {
			continue
		}
		if err := st.net.PutLoadBalancer(ctx, want); err != nil {
			return err
		}
		for _, o := range c.svcs.List() {
			s := o.(*corev1.Service)
			if slices.ContainsFunc(want.Frontends, func(f Frontend) bool { return strings.EqualFold(f.Name, frontendName(s)) }) {
				// The nodes are the rules' destinations: UpdateLoadBalancer
				// reconciles the NSG too.
				if _, err := c.reconcileNSG(ctx, s, st, backends, true); err != nil {
					return err
				}
				typ, reason, msg := corev1.EventTypeNormal, "UpdatedLoadBalancer", "Updated load balancer with new hosts"
				if len(backends) == 0 {
					typ, reason, msg = corev1.EventTypeWarning, "UnAvailableLoadBalancer", "There are no available nodes for LoadBalancer"
				}
				_ = c.event(ctx, s, typ, reason, msg)
			}
		}
	}
	return nil
}

// warn records a Warning event once per distinct message, so that retries
// do not flood the Service's events.
func (c *Controller) warn(ctx context.Context, s *corev1.Service, key, reason, msg string) {
	if c.warned[key] == msg {
		return
	}
	if c.event(ctx, s, corev1.EventTypeWarning, reason, msg) == nil {
		c.warned[key] = msg
	}
}

// reconcileNSG puts a Service's rules on the NSG azure.json names, or
// takes them off (want false), as cloud-provider-azure's
// reconcileSecurityGroup does (nsg.go); it says whether the NSG changed.
// A missing NSG fails the Service, as it does there.
func (c *Controller) reconcileNSG(ctx context.Context, s *corev1.Service, st Settings, backends []PoolAddress, want bool) (bool, error) {
	ref := st.nsgRef()
	if ref.Name == "" {
		return false, fmt.Errorf("the cloud config %s on node %s has no securityGroupName: the NSG the rules of LoadBalancer Services go on", st.ConfigPath, st.Node)
	}
	sg, err := st.net.SecurityGroup(ctx, ref)
	if err != nil {
		return false, err
	}
	if sg == nil {
		return false, fmt.Errorf("network security group %s (securityGroupName in %s) does not exist in resource group %s", ref.Name, st.ConfigPath, ref.ResourceGroup)
	}
	ch := nsgChange{svc: s, want: want, retain: map[string][]int32{}}
	for _, b := range backends {
		if a, err := netip.ParseAddr(b.IP); err == nil {
			ch.dsts = append(ch.dsts, a)
		}
	}
	// Every Service's rules have the nodes as destinations (floating IP
	// off): the other Services' node ports stay where the Service's go
	// (listSharedIPPortMapping).
	for _, o := range c.svcs.List() {
		other := o.(*corev1.Service)
		if other.Namespace == s.Namespace && other.Name == s.Name || other.Spec.Type != corev1.ServiceTypeLoadBalancer || other.Spec.LoadBalancerClass != nil {
			continue
		}
		for _, p := range other.Spec.Ports {
			if proto, err := nsgProtocol(p.Protocol); err == nil {
				ch.retain[proto] = append(ch.retain[proto], p.NodePort)
			}
		}
		for _, ing := range other.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(ing.IP); err == nil {
				ch.managed = append(ch.managed, a)
			}
		}
	}
	// And every node's address (listAvailableSecurityGroupDestinations).
	for _, o := range c.nodes.List() {
		n := o.(*corev1.Node)
		if v, ok := n.Labels[ManagedLabel]; ok && strings.EqualFold(v, "false") {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			ip := a.Address
			if c.cfg.PrivateIP != nil {
				if p, ok := c.cfg.PrivateIP(ip); ok {
					ip = p
				}
			}
			if addr, err := netip.ParseAddr(ip); err == nil {
				ch.managed = append(ch.managed, addr)
			}
		}
	}
	for _, ing := range s.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil {
			ch.managed = append(ch.managed, a)
		}
	}
	rules, changed, err := reconcileRules(sg, ch)
	if err != nil || !changed {
		return false, err
	}
	sg.Rules = rules
	return true, st.net.PutSecurityGroup(ctx, sg)
}
