package machines

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/machines/azuredisk"
	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/kubeproxy"
	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// componentSession is a running system component's own lists and
// watches, made with its pod's ServiceAccount token: what it may do is
// what the API server's RBAC lets that identity do, never the runtime's.
type componentSession struct {
	comp *startneeds.Component
	pod  *corev1.Pod
	s    componentState
	cfg  *rest.Config

	// cniMu guards cniCfg: for calico-node, the kubeconfig its
	// install-cni writes for the CNI plugin.
	cniMu  sync.Mutex
	cniCfg *rest.Config
}

// componentState is what a running component's reads say of it: a
// startneeds.Session (its own lists and watches) or Felix taking its
// syncer's updates from Typha (typhaFelix).
type componentState interface {
	Synced() bool
	NotSynced() string
	Done() <-chan struct{}
	Stop()
	Reads() int64
}

// calicoNode says whether the session is calico-node's (Linux or
// Windows): what writes the CNI plugin's credentials on its node.
func (cs *componentSession) calicoNode() bool {
	return cs.comp.Effect == startneeds.EffectPodRoutes && strings.HasPrefix(cs.comp.Name, "calico-node")
}

// startSession starts what a component's process lists and watches, once
// per pod and component, when its container runs. The component is known
// by its image and command line, as a kubelet knows nothing else of it.
//
// Felix whose container's environment names a Typha Service takes its
// updates from Typha instead (startFelixViaTypha); without one it lists
// and watches itself, as before Typha.
func (r *Runtime) startSession(m *machine, wc *workloadCluster, comp *startneeds.Component, pod *corev1.Pod, c corev1.Container) {
	if comp == nil || len(comp.Watches) == 0 {
		return
	}
	r.mu.Lock()
	for _, cs := range m.sessions[pod.UID] {
		if cs.comp.Name == comp.Name {
			r.mu.Unlock()
			return
		}
	}
	r.mu.Unlock()
	who := fmt.Sprintf("%s/%s (%s)", pod.Namespace, pod.Name, comp.Name)
	cfg, err := podAPIServer(wc, m.endpoint, pod)
	if err != nil {
		m.logs.Write(vmdisk.Containerd, "%s: %v", who, err)
		return
	}
	logf := func(format string, args ...any) {
		m.logs.Write(vmdisk.Containerd, "%s: %s", who, fmt.Sprintf(format, args...))
	}
	var state componentState
	if svc, ns, ok := felixTyphaService(wc, m.endpoint, comp, pod, c, logf); ok {
		state = r.startFelixViaTypha(m, wc, comp, cfg, svc, ns, logf)
	} else if state, err = r.startOwnSession(m, comp, cfg, logf); err != nil {
		logf("%v", err)
		return
	}
	cs := &componentSession{comp: comp, pod: pod, s: state, cfg: cfg}
	r.mu.Lock()
	if m.sessions == nil {
		m.sessions = map[types.UID][]*componentSession{}
	}
	m.sessions[pod.UID] = append(m.sessions[pod.UID], cs)
	r.mu.Unlock()
	switch comp.Effect {
	case startneeds.EffectServiceRules:
		r.refreshProxy(m)
	case startneeds.EffectPodRoutes:
		r.rerouted(m.endpoint)
	}
	if cs.calicoNode() {
		go ensureClusterInformation(cs, logf)
	}
}

// startOwnSession starts the component's own lists and watches.
func (r *Runtime) startOwnSession(m *machine, comp *startneeds.Component, cfg *rest.Config, logf func(string, ...any)) (*startneeds.Session, error) {
	return startneeds.StartSession(startneeds.SessionConfig{
		Config: cfg, Node: m.nodeName, Watches: comp.Watches, Sync: comp.Sync, Client: comp.Client,
		Log: logf,
		OnChange: func(synced bool) {
			state := "in sync: every list succeeded"
			if !synced {
				state = "not in sync"
			}
			logf("%s", state)
			switch comp.Effect {
			case startneeds.EffectServiceRules:
				r.refreshProxy(m)
			case startneeds.EffectPodRoutes:
				r.podRoutesSynced(m, synced)
			case startneeds.EffectCloudController:
				r.mu.Lock()
				wc := r.clusters[m.endpoint]
				r.mu.Unlock()
				if wc != nil {
					wc.cloud.Resync()
				}
			}
		},
	})
}

// podAPIServer is the API server as a pod's processes reach it, with the
// pod's ServiceAccount token: through the cluster's endpoint (its API
// server load balancer), as kube-proxy's session does (ensureProxy), not
// at the control-plane machine the runtime took the cluster's credentials
// from. An in-cluster client reaches the kubernetes Service, whose
// endpoints each API server keeps to those that run (kubernetes
// pkg/controlplane/reconcilers/lease.go at 1f0305fe): a pod's process
// outlives the control-plane machine it started under. Pinned to that
// machine, calico-node's install-cni minted no token for the CNI plugin
// once Cluster API replaced the machine in an upgrade, and every sandbox
// of its node failed from then on ("connect: connection refused"): a
// drain then waited forever on a budget whose replacement pod could not
// start there.
func podAPIServer(wc *workloadCluster, endpoint string, pod *corev1.Pod) (*rest.Config, error) {
	base := wc.viaEndpoint(endpoint)
	minter, err := kubernetes.NewForConfig(base)
	if err != nil {
		return nil, err
	}
	return serviceAccountConfig(base, minter, pod), nil
}

// viaEndpoint is the cluster's admin credentials aimed at its endpoint
// (the API server load balancer) rather than at the control-plane machine
// they were taken from: what runs on the nodes outlives that machine.
func (wc *workloadCluster) viaEndpoint(endpoint string) *rest.Config {
	c := rest.CopyConfig(wc.admin)
	c.Host = "https://" + endpoint
	return c
}

// ensureClusterInformation is calico-node's startup writing Calico's
// ClusterInformation with its own token, retried until it succeeds or the
// pod goes (calico-node exits and is restarted until it can).
func ensureClusterInformation(cs *componentSession, log func(format string, args ...any)) {
	version := "v3.30.7"
	for _, c := range cs.pod.Spec.Containers {
		if i := strings.LastIndex(c.Image, ":"); i > 0 && strings.Contains(c.Image, "calico/node") {
			version = c.Image[i+1:]
		}
	}
	last := ""
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := startneeds.EnsureClusterInformation(ctx, cs.cfg, version)
		cancel()
		if err == nil {
			return
		}
		if err.Error() != last {
			log("Unable to initialize ClusterInformation: %v", err)
			last = err.Error()
		}
		t := time.NewTimer(5 * time.Second)
		select {
		case <-cs.s.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// calicoCNI is the calico-node session of the machine, whose install-cni
// gave the node's CNI plugin its credentials; nil on a node without one.
func (r *Runtime) calicoCNI(m *machine) *componentSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, list := range m.sessions {
		for _, cs := range list {
			if cs.calicoNode() {
				return cs
			}
		}
	}
	return nil
}

// cniConfig is the CNI plugin's kubeconfig on the node: a token of the
// calico-cni-plugin ServiceAccount, requested once with calico-node's.
func (cs *componentSession) cniConfig(ctx context.Context) (*rest.Config, error) {
	cs.cniMu.Lock()
	defer cs.cniMu.Unlock()
	if cs.cniCfg != nil {
		return cs.cniCfg, nil
	}
	cfg, err := startneeds.CalicoCNIConfig(ctx, cs.cfg, cs.pod.Namespace)
	if err != nil {
		return nil, err
	}
	cs.cniCfg = cfg
	return cfg, nil
}

// cniNetworkAddressed is the Calico CNI plugin's ADD, once the sandbox
// has its address, with the plugin's own credentials: a rule missing
// from the calico-cni-plugin role leaves the pod without an address, as
// on a node. Nodes without calico-node have nothing to do here.
func (r *Runtime) cniNetworkAddressed(m *machine) func(ctx context.Context, pod *corev1.Pod, containerID string, ip netip.Addr) error {
	return func(ctx context.Context, pod *corev1.Pod, containerID string, ip netip.Addr) error {
		cs := r.calicoCNI(m)
		if cs == nil {
			return nil
		}
		cfg, err := cs.cniConfig(ctx)
		if err != nil {
			return err
		}
		return startneeds.CalicoCNIAdd(ctx, cfg, m.nodeName, pod, containerID, ip)
	}
}

// cniTearDown is the Calico CNI plugin's DEL for a pod whose address the
// kubelet released; its failure is logged, as containerd logs a failed
// DEL and tries again with the next sandbox clean-up.
func (r *Runtime) cniTearDown(m *machine) func(uid types.UID, pod string) {
	return func(uid types.UID, pod string) {
		cs := r.calicoCNI(m)
		ns, name, ok := strings.Cut(pod, "/")
		if cs == nil || !ok {
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg, err := cs.cniConfig(ctx)
			if err == nil {
				err = startneeds.CalicoCNIDel(ctx, cfg, ns, name, containerruntime.ContainerID(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}}, "sandbox"))
			}
			if err != nil {
				m.logs.Write(vmdisk.CNI, "DEL %s failed: %v", pod, err)
			}
		}()
	}
}

// stopSessions ends what the pod's components listed and watched.
func (r *Runtime) stopSessions(m *machine, uid types.UID) {
	r.mu.Lock()
	gone := m.sessions[uid]
	delete(m.sessions, uid)
	r.mu.Unlock()
	for _, cs := range gone {
		inSync := cs.comp.Effect == startneeds.EffectPodRoutes && cs.s.Synced()
		cs.s.Stop()
		switch {
		case cs.comp.Effect == startneeds.EffectServiceRules:
			r.refreshProxy(m)
		case inSync:
			// An agent in sync when it stops ends its time in sync
			// now (a session's Stop reports nothing itself).
			r.podRoutesSynced(m, false)
		case cs.comp.Effect == startneeds.EffectPodRoutes:
			r.rerouted(m.endpoint)
		}
	}
}

func (r *Runtime) stopAllSessions(m *machine) {
	r.mu.Lock()
	var uids []types.UID
	for uid := range m.sessions {
		uids = append(uids, uid)
	}
	r.mu.Unlock()
	for _, uid := range uids {
		r.stopSessions(m, uid)
	}
}

// synced says whether the node's components with effect are in sync:
// ok false when the node runs none (the effect is then not gated here).
func (r *Runtime) synced(m *machine, effect string) (synced, ok bool, why string) {
	r.mu.Lock()
	ss := sessionsWith(m, effect)
	r.mu.Unlock()
	if len(ss) == 0 {
		return false, false, ""
	}
	for _, cs := range ss {
		if ns := cs.s.NotSynced(); ns != "" {
			return false, true, fmt.Sprintf("%s/%s (%s) not in sync: %s", cs.pod.Namespace, cs.pod.Name, cs.comp.Name, ns)
		}
	}
	return true, true, ""
}

// sessionsWith are the machine's component sessions with effect; the
// caller holds r.mu.
func sessionsWith(m *machine, effect string) []*componentSession {
	var out []*componentSession
	for _, list := range m.sessions {
		for _, cs := range list {
			if cs.comp.Effect == effect {
				out = append(out, cs)
			}
		}
	}
	return out
}

// execProbe is the health command of a component whose sync it reports
// (calico-node -felix-ready, kube-controllers' check-status -r): it fails
// while the component is not in sync, as Felix's readiness endpoint
// answers 503 until its datastore is in sync.
func (r *Runtime) execProbe(m *machine) func(pod *corev1.Pod, container string, command []string) (bool, bool, string) {
	return func(pod *corev1.Pod, container string, command []string) (bool, bool, string) {
		r.mu.Lock()
		list := m.sessions[pod.UID]
		r.mu.Unlock()
		for _, cs := range list {
			if cs.comp.SyncProbe == "" || !slices.Contains(command, cs.comp.SyncProbe) {
				continue
			}
			if ns := cs.s.NotSynced(); ns != "" {
				return true, false, fmt.Sprintf("%s is not ready: not in sync with the datastore (%s)", cs.comp.Name, ns)
			}
			return true, true, ""
		}
		return false, false, ""
	}
}

// refreshProxy tells the node's kube-proxy whether it programs its rules:
// its pod runs and, when the runtime knows the component, it has listed
// what kube-proxy's proxier waits for (Services and EndpointSlices).
func (r *Runtime) refreshProxy(m *machine) {
	r.mu.Lock()
	pn, installed := m.proxy, m.installed["kube-proxy"]
	r.mu.Unlock()
	if pn == nil {
		return
	}
	pn.SetActive(installed && r.proxySynced(m))
}

func (r *Runtime) proxySynced(m *machine) bool {
	synced, known, _ := r.synced(m, startneeds.EffectServiceRules)
	return synced || !known
}

// rerouted tells the kube-proxy of every node of a cluster that the pod
// routes podRoute weighs changed: a CNI agent of one of its nodes started,
// stopped, or came into or out of sync.
func (r *Runtime) rerouted(endpoint string) {
	r.mu.Lock()
	var pns []*kubeproxy.Node
	for _, o := range r.machines {
		if o.endpoint == endpoint && o.proxy != nil {
			pns = append(pns, o.proxy)
		}
	}
	r.mu.Unlock()
	for _, pn := range pns {
		pn.Rerouted()
	}
}

// podRoute says whether a connection from machine m reaches pod IP ip of
// its cluster: a pod of another node is reached only through routes that
// the CNI's agent on both nodes programmed (Felix's VXLAN routes and
// tunnel, HNS remote-subnet policies), which it does only once in sync
// (Felix's int_dataplane.go / win_dataplane.go apply nothing before), and,
// when m sends pod packets unencapsulated (host-gw), through a route of
// its subnet to the pod's node (podnetwork.go). Whatever m forwards to a
// pod takes the same way: its own connections and what its kube-proxy
// forwards to a Service's endpoint.
func (r *Runtime) podRoute(m *machine, ip netip.Addr) error {
	r.mu.Lock()
	var owner *machine
	for _, o := range r.machines {
		if o.endpoint != m.endpoint || o.podCIDR == nil {
			continue
		}
		if p := o.podCIDR(); p.IsValid() && p.Contains(ip) {
			owner = o
		}
	}
	r.mu.Unlock()
	if owner == nil || owner == m {
		return nil
	}
	for _, n := range [][2]*machine{{m, owner}, {owner, m}} {
		synced, known, why := r.synced(n[0], startneeds.EffectPodRoutes)
		if synced || !known && !r.agentsRoute(n[0]) {
			continue
		}
		if !r.keepsRoutes(n[0], n[1]) {
			if !known {
				why = "its CNI agent is not running"
			}
			return fmt.Errorf("no route to host: node %s has no routes to other nodes' pods (%s)", n[0].nodeName, why)
		}
	}
	return r.underlayRoute(m, owner, ip)
}

// agentsRoute says whether pod routes in n's cluster are an agent's to
// program: one ran on n since it booted (a DaemonSet is replacing it), or
// runs or ran on another node of the cluster (n's has not started yet).
// A cluster whose CNI runs no such agent (flannel's routes are not
// modelled per node) routes every pod.
func (r *Runtime) agentsRoute(n *machine) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.machines {
		if o.endpoint != n.endpoint && o != n {
			continue
		}
		if !o.podRoutes.first.IsZero() || len(sessionsWith(o, startneeds.EffectPodRoutes)) > 0 {
			return true
		}
	}
	return !n.podRoutes.first.IsZero()
}

// routeSpan is when a machine's CNI agent had its pod routes in sync since
// the machine booted. Felix applies nothing to the dataplane before it is
// in sync (int_dataplane.go / win_dataplane.go, as podRoute says), and the
// routes, VXLAN neighbours and HNS remote-subnet policies it programmed
// are the kernel's and the host network service's, not the process's: an
// agent that exits, or loses Typha and is restarted, leaves them in place
// until it is in sync again and its resync replaces them. A reboot loses
// them (a machine is made anew at each boot).
type routeSpan struct {
	first time.Time // the agent's first time in sync; zero: never
	last  time.Time // when its latest period in sync ended; zero: none has
}

// podRoutesSynced records the node's CNI agent coming into sync or leaving
// it, and tells the cluster's kube-proxies the routes may have changed.
func (r *Runtime) podRoutesSynced(m *machine, in bool) {
	now := time.Now()
	r.mu.Lock()
	switch {
	case in && m.podRoutes.first.IsZero():
		m.podRoutes.first = now
	case !in && !m.podRoutes.first.IsZero():
		m.podRoutes.last = now
	}
	r.mu.Unlock()
	r.rerouted(m.endpoint)
}

// keepsRoutes says whether node n, whose agent is out of sync now, still
// has the routes to other's pods its agent programmed: it was in sync at
// some time after other's agent first was (by which other's block, and its
// route, existed). While a DaemonSet replaces the agent, one of two may
// still be in sync: its routes are there now.
func (r *Runtime) keepsRoutes(n, other *machine) bool {
	r.mu.Lock()
	o, last := other.podRoutes.first, n.podRoutes.last
	agents := sessionsWith(n, startneeds.EffectPodRoutes)
	r.mu.Unlock()
	if o.IsZero() {
		return false
	}
	if slices.ContainsFunc(agents, func(cs *componentSession) bool { return cs.s.Synced() }) {
		return true
	}
	return !last.IsZero() && !last.Before(o)
}

// initializeNode is the cloud node manager's node controller: once its
// Node informer has synced it initializes the node with the pod's own
// credentials (get, update nodes; patch nodes/status), retrying as its
// informer's events do until the pod goes.
func (r *Runtime) initializeNode(m *machine, host string, pod *corev1.Pod) {
	r.mu.Lock()
	var cs *componentSession
	for _, c := range m.sessions[pod.UID] {
		if c.comp.Effect == startneeds.EffectInitializesNode {
			cs = c
		}
	}
	r.mu.Unlock()
	if cs == nil {
		return
	}
	client, err := kubernetes.NewForConfig(cs.cfg)
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		wait, last := time.Second, ""
		for {
			err := fmt.Errorf("waiting for the node informer to sync: %s", cs.s.NotSynced())
			if cs.s.Synced() {
				if err = cloudprovider.InitializeNode(ctx, client, m.nodeName, instance(m, host)); err == nil {
					m.logs.Write(vmdisk.Kubelet, "cloud-node-manager: initialized node %s (%s)", m.nodeName, m.providerID)
					return
				}
			}
			if err.Error() != last {
				m.logs.Write(vmdisk.Kubelet, "cloud-node-manager: failed to initialize node %s: %v", m.nodeName, err)
				last = err.Error()
			}
			t := time.NewTimer(wait)
			select {
			case <-cs.s.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, 30*time.Second)
		}
	}()
}

// ccmSynced says whether a cloud-controller-manager pod's own informers
// have synced; a pod the runtime runs no session for (its node is not
// one of this runtime's machines) is not held back.
func (r *Runtime) ccmSynced(pod *corev1.Pod) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.machines {
		for _, cs := range m.sessions[pod.UID] {
			if cs.comp.Effect == startneeds.EffectCloudController {
				return cs.s.Synced()
			}
		}
	}
	return true
}

// sidecarSynced says whether the Azure Disk CSI controller pod's sidecar
// of a role has synced its own informers; a pod this runtime runs no
// session for (its node is not one of its machines) is not held back.
func (r *Runtime) sidecarSynced(pod *corev1.Pod, role string) (bool, string) {
	name := map[string]string{azuredisk.RoleProvisioner: "csi-provisioner", azuredisk.RoleAttacher: "csi-attacher"}[role]
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.machines {
		for _, cs := range m.sessions[pod.UID] {
			if cs.comp.Name == name {
				ns := cs.s.NotSynced()
				return ns == "", ns
			}
		}
	}
	return true, ""
}
