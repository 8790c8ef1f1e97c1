package machines

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/kubeproxy"
	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// DialFromNode connects from a node as its shell's curl does, with a
// connect timeout of 2 s (curl --connect-timeout 2): a SYN that nothing
// answers (a Service IP the node's kube-proxy has not programmed) fails
// after it with an i/o timeout.
func (r *Runtime) DialFromNode(ctx context.Context, nodeName, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m := r.machineOfNode(nodeName)
	if m == nil {
		return nil, errors.New("no machine runs node " + nodeName)
	}
	return r.nodeDial(m)(ctx, addr)
}

// MetricsServerArgs is the add-on container's command line as the real
// metrics-server is started with it.
var MetricsServerArgs = metricsServerArgs

// AzureDiskProxyCheck is azureDiskProxyCheck, for its test.
var AzureDiskProxyCheck = azureDiskProxyCheck

// AddComponentNode runs node nodeName of the cluster whose API server is
// cfg (reached at endpoint) on a machine without a VM or kubelet: its
// system components' sessions, kube-proxy and routes, for the tests of
// what their rights do. Its pods' IPs are in podCIDR.
func (r *Runtime) AddComponentNode(cfg *rest.Config, endpoint, nodeName string, host netip.Addr, podCIDR netip.Prefix, dir string) {
	m := &machine{arm: arm.Machine{Name: nodeName, ID: "/test/" + nodeName, OS: "Linux", VMSize: "Standard_D2s_v3", Location: "westeurope"},
		nodeName: nodeName, endpoint: endpoint, dir: dir, providerID: "azure:///test/" + nodeName, booted: make(chan struct{}), cancel: func() {}}
	close(m.booted)
	m.logs = vmdisk.NewLogs(m.disk(""))
	m.podCIDR = func() netip.Prefix { return podCIDR }
	m.proxyNode = &kubeproxy.NodeConfig{NodeName: nodeName, Address: host, Logs: m.logs}
	r.mu.Lock()
	if r.clusters[endpoint] == nil {
		r.clusters[endpoint] = &workloadCluster{admin: cfg}
	}
	r.machines[key(m.arm.ID)] = m
	r.mu.Unlock()
	r.ensureProxy(m)
}

// SetNodeNIC gives a node of AddComponentNode the VNet address of its NIC
// and the emulator's routes for the packets it sends, as a machine the
// emulator booted has them (arm.Machine).
func (r *Runtime) SetNodeNIC(nodeName, privateIP string, nextHop func(netip.Addr) (arm.Hop, error)) {
	m := r.machineOfNode(nodeName)
	r.mu.Lock()
	defer r.mu.Unlock()
	m.arm.PrivateIPs, m.arm.NextHop = []string{privateIP}, nextHop
}

// HideCluster makes the node's cluster unknown to the runtime, as it is
// while a node resumed from its disk boots before its control plane; the
// func returned makes it known again (once, however often it is called).
func (r *Runtime) HideCluster(nodeName string) (restore func()) {
	m := r.machineOfNode(nodeName)
	r.mu.Lock()
	wc := r.clusters[m.endpoint]
	delete(r.clusters, m.endpoint)
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.clusters[m.endpoint] = wc
			r.mu.Unlock()
		})
	}
}

// StartComponents starts what the pod's system components list and
// watch, as the node's kubelet does when its containers run, and what the
// pod installs on the node.
func (r *Runtime) StartComponents(nodeName string, pod *corev1.Pod, installs ...string) error {
	return r.startComponents("linux", nodeName, pod, installs...)
}

// StartWindowsComponents is StartComponents for the Windows components
// of the pod (the node stands for a Windows node: its own session's
// rules are the same).
func (r *Runtime) StartWindowsComponents(nodeName string, pod *corev1.Pod) error {
	return r.startComponents("windows", nodeName, pod)
}

func (r *Runtime) startComponents(os, nodeName string, pod *corev1.Pod, installs ...string) error {
	m := r.machineOfNode(nodeName)
	r.mu.Lock()
	wc := r.clusters[m.endpoint]
	r.mu.Unlock()
	admin, err := kubernetes.NewForConfig(wc.admin)
	if err != nil {
		return err
	}
	for _, c := range pod.Spec.Containers {
		comp := catalog().Find(os, c)
		r.startSession(m, wc, comp, pod, c)
		if comp != nil && comp.Effect == startneeds.EffectPodNetwork {
			r.learnPodBackend(context.Background(), admin, m, pod, c)
		}
	}
	if catalog().Effect(os, pod) == startneeds.EffectInitializesNode {
		r.initializeNode(m, "10.1.0.4", pod)
	}
	if len(installs) > 0 {
		what := map[string]bool{}
		for _, i := range installs {
			what[i] = true
		}
		r.setInstalled(m, what)
	}
	return nil
}

// SetInstalled is the node's kubelet reporting what its running pods
// install; nothing once they are gone.
func (r *Runtime) SetInstalled(nodeName string, what ...string) {
	set := map[string]bool{}
	for _, w := range what {
		set[w] = true
	}
	r.setInstalled(r.machineOfNode(nodeName), set)
}

// StopComponents ends them, as when the pod goes.
func (r *Runtime) StopComponents(nodeName string, pod *corev1.Pod) {
	r.stopSessions(r.machineOfNode(nodeName), pod.UID)
}

// ExecProbe is the node's kubelet running an exec probe of the pod.
func (r *Runtime) ExecProbe(nodeName string, pod *corev1.Pod, container string, command []string) (handled, ok bool, msg string) {
	return r.execProbe(r.machineOfNode(nodeName))(pod, container, command)
}

// RemoveComponentNode stops what AddComponentNode started.
func (r *Runtime) RemoveComponentNode(nodeName string) {
	m := r.machineOfNode(nodeName)
	r.stopAllSessions(m)
	r.stopProxy(m)
	r.mu.Lock()
	delete(r.machines, key(m.arm.ID))
	delete(r.clusters, m.endpoint)
	r.mu.Unlock()
}

// ComponentReads is the number of requests the node's system components
// have sent with their own credentials (lists, watches, discovery).
func (r *Runtime) ComponentReads(nodeName string) int64 {
	m := r.machineOfNode(nodeName)
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, list := range m.sessions {
		for _, cs := range list {
			n += cs.s.Reads()
		}
	}
	return n
}

// CNIPluginConfig is the CNI plugin's kubeconfig as the node's
// calico-node's install-cni gives it (what the CNI's ADD runs with).
func (r *Runtime) CNIPluginConfig(ctx context.Context, nodeName string) (*rest.Config, error) {
	cs := r.calicoCNI(r.machineOfNode(nodeName))
	if cs == nil {
		return nil, errors.New("no calico-node runs on " + nodeName)
	}
	return cs.cniConfig(ctx)
}

// RunTypha starts the pod's Typha container as the node's kubelet runs
// it (realPrograms), on the node's host address, which it returns; stop
// ends it as when its container stops.
func (r *Runtime) RunTypha(nodeName string, pod *corev1.Pod) (host netip.Addr, stop func(), ok bool) {
	m := r.machineOfNode(nodeName)
	ctx, cancel := context.WithCancel(context.Background())
	host = m.proxyNode.Address
	if !r.realPrograms(m)(ctx, pod, pod.Spec.Containers[0], host) {
		cancel()
		return host, func() {}, false
	}
	return host, cancel, true
}

// ContainerStartCheck is the start check node nodeName's kubelet asks
// before each start of a container (componentHooks), one per kubelet as
// there: it remembers the cluster it last found.
func (r *Runtime) ContainerStartCheck(ctx context.Context, os, nodeName string) func(pod *corev1.Pod, c corev1.Container) error {
	m := r.machineOfNode(nodeName)
	check, _ := r.componentHooks(ctx, m, m.proxyNode.Address.String(), os, containerruntime.Node{Name: nodeName, OS: os, Disk: m.disk(""), Dial: r.nodeDial(m)})
	return func(pod *corev1.Pod, c corev1.Container) error { return check(ctx, pod, &c, nil) }
}
