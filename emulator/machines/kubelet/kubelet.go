// Package kubelet simulates a node's kubelet against a real API server:
// it registers the Node with the labels, taints, capacity and addresses a
// real kubelet of its OS sets, keeps its lease and status, runs the pods
// bound to it by the rules of its OS (image platform, Windows limits, CNI
// readiness), creates mirror pods for static pods and serves the kubelet
// API: port-forward (to the real processes behind a static pod, which it
// restarts when they exit, and to any pod's simulated listeners), exec
// into a container's simulated shell (exec.go, package ctrshell) and
// logs. Containers run no application process: a container the rules
// admit lives as lifecycle.go describes (restartPolicy, run to
// completion, probes), and attach is refused.
package kubelet

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

// Port is the kubelet API's port.
const Port = 10250

// Config describes the node a kubelet runs.
type Config struct {
	NodeName string
	// Client acts with the node's own credentials (system:node:NAME), so
	// the API server's Node authorizer and NodeRestriction apply.
	Client kubernetes.Interface
	// Address is the node's InternalIP, where its kubelet API listens.
	Address netip.Addr
	// ClientCA verifies the client certificates presented to the kubelet
	// API (the kubelet's authentication.x509.clientCAFile: kubeadm sets
	// the cluster CA, which signed the API server's kubelet client
	// certificate); nil accepts none, and only bearer tokens the API
	// server's TokenReview accepts authenticate.
	ClientCA *x509.CertPool
	Host     Host
	Labels   map[string]string
	Taints   []corev1.Taint
	Capacity corev1.ResourceList
	NodeInfo corev1.NodeSystemInfo
	// StaticPods are mirrored into the API; port-forwards to them reach
	// the node's address.
	StaticPods []*corev1.Pod
	// StaticProcesses are the processes behind static pods, by pod name;
	// the kubelet restarts them when they exit and its mirror pods show
	// it. A static pod without one is reported running.
	StaticProcesses map[string]Process
	Images          Images
	Log             logr.Logger
	// HeartbeatInterval is how often the lease is renewed (10s when 0).
	HeartbeatInterval time.Duration
	// RegistrationRetryCap is the longest wait between tries to register
	// the Node (the kubelet's 7s when 0). A test that must see many tries
	// against an API server that does not answer shortens it.
	RegistrationRetryCap time.Duration
	// Logs receives what the node's kubelet, container runtime and CNI
	// would write to their logs on the machine; nil keeps none.
	Logs *vmdisk.Logs
	// StartCheck, when set, is asked before every container start; its
	// error fails the start (see StartCheck).
	StartCheck StartCheck
	// Started, when set, is told when a pod's containers first run, so
	// that what the simulated processes do on the node can happen.
	Started func(ctx context.Context, pod *corev1.Pod)
	// Stopped, when set, is told when a pod's containers have ended for
	// good (the pod deleted or finished), so that what Started began for
	// it stops.
	Stopped func(uid types.UID)
	// ExecProbe, when set, is asked for an exec probe's result: handled
	// false leaves the probe to the kubelet's default (counted as
	// succeeding); otherwise ok and msg are the command's result, for a
	// process whose health command the runtime models.
	ExecProbe ExecProbe
	// PodAddress is the host address where a pod of this node, by its pod
	// IP, is reached: its containers' servers listen there (serve.go).
	// Pod IPs are not addresses of this machine; nil serves no pod ports.
	PodAddress func(podIP string) (netip.Addr, error)
	// NetworkConfigured, when set, says whether the node's CNI
	// configuration directory holds a network configuration: what
	// containerd's CRI reports as NetworkReady. Without it a running pod
	// whose image provides "cni" counts.
	NetworkConfigured func() bool
	// SetUpNetwork, when set, is the CNI's ADD for a pod that is not in
	// the host's network, run before its sandbox gets an address; its
	// error fails the sandbox (FailedCreatePodSandBox), retried.
	SetUpNetwork func(ctx context.Context, pod *corev1.Pod) error
	// NetworkAddressed, when set, is the rest of the CNI's ADD once the
	// sandbox has its address (the sandbox's container ID): what the
	// plugin writes to the API server for it. Its error fails the
	// sandbox as SetUpNetwork's does, and the address is released.
	NetworkAddressed func(ctx context.Context, pod *corev1.Pod, containerID string, ip netip.Addr) error
	// TearDownNetwork, when set, is the CNI's DEL once a pod's address is
	// released (pod is namespace/name).
	TearDownNetwork func(uid types.UID, pod string)
	// Installed, when set, is told what the node's pods have installed
	// ("cni", "kube-proxy") whenever that changes, so that the runtime can
	// start what they would have set up (kube-proxy's Service rules).
	Installed func(what map[string]bool)
	// Egress, when set, says whether the machine reaches the internet
	// for a protocol ("Tcp"): nil when it does. Images come from public
	// registries, so a pull of an image the node does not have needs Tcp.
	// Nil reaches everything.
	Egress func(protocol string) error
	// PodDial is how a pod with IP podIP connects (a host-network pod:
	// podIP ""), for the programs its exec sessions run (busybox's wget).
	// Nil: its pods have no network.
	PodDial func(podIP string) func(ctx context.Context, addr string) (net.Conn, error)
	// Disk is the node's disk: the kubelet keeps the pods' emptyDir
	// volumes there, and hostPath volumes are its directories. Without
	// it (Root "") an emptyDir lives only in the exec sessions' memory.
	Disk vmdisk.Disk
	// Run, when set, is asked to start the real program behind a
	// container as it starts (serve.go): what it starts binds the
	// container's ports itself instead of the simulated page.
	Run RunFunc
	// CSIPlugin, when set, is asked when a pod's containers first run
	// whether the pod is a CSI driver's node plugin with its registrar:
	// the driver's name and its node service, which the kubelet then
	// registers (csi.go) until the pod goes.
	CSIPlugin func(pod *corev1.Pod) (driver string, p CSIPlugin)
}

// Kubelet is a running simulated kubelet.
type Kubelet struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan struct{}
	srv    *server

	queue workqueue.TypedRateLimitingInterface[string]
	pods  listersv1.PodLister
	ipam  *ipam

	mu sync.Mutex
	// running maps a pod UID to what its images install ("cni", ...).
	running map[string][]string
	ready   bool
	reason  string
	// sent remembers the events recorded, so repeats are not.
	sent map[string]bool
	// hnsNetworks are the HNS networks the Windows CNI created, by name,
	// with their type.
	hnsNetworks map[string]string
	// runs are the pods' containers as the runtime knows them; static the
	// static pods' by name.
	runs   map[types.UID]*podRun
	static map[string]*podRun
	// outputs are what containers' processes wrote, by pod UID "/"
	// container name, for the containerLogs endpoint.
	outputs map[string][]string
	// installed is what Config.Installed was last told.
	installed map[string]bool
	// images are the images on the node's disk, by canonical reference,
	// with the manifest their pull resolved: a container of one whose
	// pull policy is not Always starts without asking its registry.
	images map[string]*registry.Manifest
	// pullBackOff is the image pull back-off, by pod UID and image.
	pullBackOff map[string]*pullBackOff
	// csi are the CSI drivers registered on the node; inUse the volumes
	// it reports in use (csi.go).
	csi   map[string]csiRegistration
	inUse map[string]bool
	// kick asks for the mirror pods' status to be posted now.
	kick chan struct{}
	// views are the running containers' filesystems as exec sessions
	// see them, by container ID (exec.go).
	execMu sync.Mutex
	views  map[string]*ctrView
	// decisions are the kubelet API's authorization answers (auth.go).
	decisions decisions
	// started is when the kubelet started: the node's stats start then;
	// usage keeps the simulated usage counters (stats.go).
	started time.Time
	usage   usageState
}

// Start registers the node and runs the kubelet until Stop. It returns
// once the node is registered, however long its API server takes to
// answer, or with ctx's error when boot's ctx ends first (the machine was
// switched off meanwhile).
func Start(ctx context.Context, cfg Config) (*Kubelet, error) {
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	boot := ctx
	cfg.Capacity = nodeCapacity(cfg.Host, cfg.Capacity)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k := &Kubelet{
		cfg: cfg, cancel: cancel, done: make(chan struct{}),
		queue:       workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 10*time.Second)),
		ipam:        &ipam{byUID: map[string]netip.Addr{}, pods: map[string]string{}},
		running:     map[string][]string{},
		runs:        map[types.UID]*podRun{},
		outputs:     map[string][]string{},
		images:      map[string]*registry.Manifest{},
		static:      map[string]*podRun{},
		kick:        make(chan struct{}, 1),
		pullBackOff: map[string]*pullBackOff{},
		started:     time.Now(),
	}
	srv, err := startServer(net.JoinHostPort(cfg.Address.String(), strconv.Itoa(Port)), k)
	if err != nil {
		cancel()
		return nil, err
	}
	k.srv = srv
	k.ready, k.reason = k.networkReady()
	if err := k.register(boot); err != nil {
		cancel()
		_ = srv.close()
		return nil, err
	}
	// Managed fields are the API server's bookkeeping, which no kubelet
	// decision reads; a thousand nodes' pods keep tens of MiB of them.
	// An update that omits them leaves them as they are.
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}), informers.WithTransform(crcache.TransformStripManagedFields()))
	inf := factory.Core().V1().Pods()
	// Under mu: the kubelet API, already serving, reads it for stats.
	k.mu.Lock()
	k.pods = inf.Lister()
	k.mu.Unlock()
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.enqueue,
		UpdateFunc: func(_, o any) { k.enqueue(o) },
		DeleteFunc: k.enqueue,
	})
	factory.Start(ctx.Done())
	go func() {
		defer close(k.done)
		var wg sync.WaitGroup
		wg.Add(3) // heartbeat, mirror pods, pod worker
		for _, sp := range cfg.StaticPods {
			if p, ok := cfg.StaticProcesses[sp.Name]; ok {
				wg.Add(2)
				go func() { defer wg.Done(); k.supervise(ctx, sp, p) }()
				go func() { defer wg.Done(); k.probeStatic(ctx, sp, p) }()
			}
		}
		go func() { defer wg.Done(); k.heartbeat(ctx) }()
		go func() {
			defer wg.Done()
			if cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
				k.mirrorStaticPods(ctx)
			}
		}()
		go func() {
			defer wg.Done()
			if cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
				k.work(ctx)
			}
		}()
		<-ctx.Done()
		k.queue.ShutDown()
		factory.Shutdown()
		wg.Wait()
		// The machine is off: its containers' sockets close.
		k.mu.Lock()
		for _, r := range k.runs {
			r.closeAll()
		}
		k.mu.Unlock()
	}()
	return k, nil
}

// Stop stops the kubelet; the Node stays in the API, going NotReady once
// its lease expires, as when a machine is switched off.
func (k *Kubelet) Stop() {
	k.cancel()
	_ = k.srv.close()
	<-k.done
}

func (k *Kubelet) enqueue(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		k.queue.Add(p.Namespace + "/" + p.Name)
	}
}

// register creates the Node as the kubelet does at start, or adopts the
// one a previous run of this machine left.
func (k *Kubelet) register(ctx context.Context) error {
	c := k.cfg
	alloc := c.Capacity.DeepCopy()
	// The kubelet reserves memory for eviction; 100Mi is its default.
	if mem, ok := alloc[corev1.ResourceMemory]; ok {
		mem.Sub(resourceMustParse("100Mi"))
		alloc[corev1.ResourceMemory] = mem
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: c.NodeName, Labels: c.Labels, Annotations: map[string]string{
			"node.alpha.kubernetes.io/ttl":                           "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		}},
		Spec: corev1.NodeSpec{Taints: c.Taints},
		// Registered with its capacity, as the kubelet does, so the
		// scheduler never sees a node that fits no pod.
		Status: corev1.NodeStatus{Capacity: c.Capacity, Allocatable: alloc, NodeInfo: c.NodeInfo,
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: c.Address.String()}, {Type: corev1.NodeHostName, Address: c.NodeName}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: Port}},
			Conditions:      mergeConditions(nil, metav1.Now(), k.ready, k.reason)},
	}
	// The kubelet tries to register until it has: it waits 100ms before
	// its first try and doubles the wait up to 7s, with no last try
	// (kubernetes/kubernetes pkg/kubelet/kubelet_node_status.go,
	// registerWithAPIServer, at c579a3279f1fe79976eba0660e06a117ec0974e4).
	// A node that boots before its API server answers (a world resumed:
	// the workers come up with the control-plane machine, and the API
	// server's load balancer resets their connections until its probe
	// sees the restarted API server) registers once it does, rather than
	// staying down with its old Node. A Node of that name is adopted (its
	// status brought up to date) in the same try.
	step, retryCap := 100*time.Millisecond, c.RegistrationRetryCap
	if retryCap == 0 {
		retryCap = 7 * time.Second
	}
	for {
		t := time.NewTimer(step)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("node %s had not registered with the API server when the machine stopped: %w", c.NodeName, ctx.Err())
		case <-t.C:
		}
		step = min(2*step, retryCap)
		_, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = k.updateStatus(ctx, alloc)
		}
		if err == nil {
			break
		}
		c.Log.V(1).Info("registering node", "error", err.Error())
	}
	c.Logs.Write(vmdisk.Kubelet, "Successfully registered node %s (%s/%s, %s)", c.NodeName, c.Host.OS, c.Host.Arch, c.NodeInfo.OSImage)
	return nil
}

// updateStatus patches the node's status, as the kubelet does: a patch of
// status alone, so that a concurrent change of the node's spec (the cloud
// controller lifting a taint) is neither lost nor read as this node
// changing its own taints, which NodeRestriction forbids.
func (k *Kubelet) updateStatus(ctx context.Context, alloc corev1.ResourceList) error {
	c := k.cfg
	k.mu.Lock()
	ready, reason := k.ready, k.reason
	k.mu.Unlock()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	status := corev1.NodeStatus{
		NodeInfo:        c.NodeInfo,
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: c.Address.String()}, {Type: corev1.NodeHostName, Address: c.NodeName}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: Port}},
		Conditions:      mergeConditions(node.Status.Conditions, metav1.Now(), ready, reason),
	}
	if alloc != nil {
		status.Capacity, status.Allocatable = c.Capacity, alloc
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = c.Client.CoreV1().Nodes().Patch(ctx, c.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

func mergeConditions(old []corev1.NodeCondition, now metav1.Time, ready bool, reason string) []corev1.NodeCondition {
	want := []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
	}
	if !ready {
		want[3].Status, want[3].Reason, want[3].Message = corev1.ConditionFalse, "KubeletNotReady", reason
	}
	for i := range want {
		want[i].LastHeartbeatTime = now
		want[i].LastTransitionTime = now
		for _, o := range old {
			if o.Type == want[i].Type && o.Status == want[i].Status {
				want[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return want
}

// statusReportInterval is how often the node's status is posted when
// nothing in it changed: the kubelet's nodeStatusReportFrequency default.
// The lease, renewed every HeartbeatInterval, is the heartbeat.
const statusReportInterval = 5 * time.Minute

// heartbeat renews the node lease and reposts status every
// statusReportInterval and on every readiness change.
func (k *Kubelet) heartbeat(ctx context.Context) {
	lastStatus := time.Now()
	tick := time.NewTicker(k.cfg.HeartbeatInterval)
	defer tick.Stop()
	var lease *coordinationv1.Lease
	for {
		var err error
		if lease, err = k.renewLease(ctx, lease); err != nil && ctx.Err() == nil {
			k.cfg.Log.V(1).Info("renewing node lease", "error", err.Error())
		}
		if time.Since(lastStatus) > statusReportInterval {
			if err := k.updateStatus(ctx, nil); err == nil {
				lastStatus = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renewLease renews the node's lease as the kubelet's lease controller
// does: from the lease it last wrote, reading it again (or creating it)
// only when that fails. It returns the lease to renew next time.
func (k *Kubelet) renewLease(ctx context.Context, last *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := k.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	if last != nil {
		l := last.DeepCopy()
		l.Spec.RenewTime = &now
		if updated, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			return updated, nil
		}
		// Changed or deleted by someone else: read it again.
	}
	l, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.cfg.NodeName), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
	case err != nil:
		return nil, err
	}
	l.Spec.RenewTime = &now
	return leases.Update(ctx, l, metav1.UpdateOptions{})
}

// networkReady is the container runtime's network status: containerd
// reports NetworkReady once a network configuration is in its CNI
// configuration directory (internal/cri/server/status.go; the message is
// the kubelet's, as a node shows it).
func (k *Kubelet) networkReady() (bool, string) {
	cni := false
	if k.cfg.NetworkConfigured != nil {
		cni = k.cfg.NetworkConfigured()
	} else {
		for _, provides := range k.running {
			for _, p := range provides {
				cni = cni || p == "cni"
			}
		}
	}
	if !cni {
		return false, "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	}
	return true, ""
}

// setRunning records what a pod's images installed, and reposts the
// node's status when readiness changes.
func (k *Kubelet) setRunning(ctx context.Context, uid string, provides []string, running bool) {
	k.mu.Lock()
	if running {
		k.running[uid] = provides
	} else {
		delete(k.running, uid)
	}
	was := k.ready
	k.ready, k.reason = k.networkReady()
	changed := was != k.ready
	ready, reason := k.ready, k.reason
	installed := map[string]bool{}
	for _, provides := range k.running {
		for _, p := range provides {
			installed[p] = true
		}
	}
	tell := k.cfg.Installed != nil && !maps.Equal(installed, k.installed)
	if tell {
		k.installed = installed
	}
	k.mu.Unlock()
	if tell {
		k.cfg.Installed(installed)
	}
	if changed {
		if ready {
			k.cfg.Logs.Write(vmdisk.Kubelet, "Node %s became Ready: the network plugin is initialized", k.cfg.NodeName)
		} else {
			k.cfg.Logs.Write(vmdisk.Kubelet, "Node %s not ready: %s", k.cfg.NodeName, reason)
		}
		if err := k.updateStatus(ctx, nil); err != nil {
			k.cfg.Log.Error(err, "posting node status")
		}
		if k.ready {
			// Pods waiting for the network can start now.
			for _, key := range k.queueAllPods() {
				k.queue.Add(key)
			}
		}
	}
}

func (k *Kubelet) queueAllPods() []string {
	pods, _ := k.pods.List(labelsEverything())
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// serverTLS is the kubelet API's certificate: self-signed, as a kubelet
// makes one when serving certificates are not bootstrapped (kubernetes
// v1.36.3 cmd/kubelet/app/server.go:1151 InitializeTLS, which calls
// client-go's util/cert GenerateSelfSignedCertKey): a CA named
// "<node>-ca@<unix time>" and, signed by it, a server certificate for the
// node's name, valid from an hour ago for a year, both RSA 2048 and
// served as a chain; the node's address is added to it so that a client
// verifying names sees the one it dialled. The key pairs are made once
// per process and shared by its kubelets (servingKeys): two RSA keys a
// node took 0.2 CPU-seconds, the largest part of winkube's CPU in a
// bring-up (11% at 1+100+400), against a few milliseconds for the two
// signatures. Each node still has its own CA and certificate; the keys
// are in this process's memory only, as every simulated node is.
func serverTLS(name string, addr netip.Addr) (*tls.Config, error) {
	keys, err := servingKeys()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	from, until := now.Add(-time.Hour), now.Add(-time.Hour+365*24*time.Hour)
	ca := &x509.Certificate{
		SerialNumber: serialNumber(), Subject: pkix.Name{CommonName: fmt.Sprintf("%s-ca@%d", name, now.Unix())},
		NotBefore: from, NotAfter: until, BasicConstraintsValid: true, IsCA: true,
		KeyUsage: x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &keys.ca.PublicKey, keys.ca)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serialNumber(), Subject: pkix.Name{CommonName: fmt.Sprintf("%s@%d", name, now.Unix())},
		NotBefore: from, NotAfter: until, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IP(addr.AsSlice())},
	}
	if ip := net.ParseIP(name); ip != nil {
		leaf.IPAddresses = append([]net.IP{ip}, leaf.IPAddresses...)
	} else {
		leaf.DNSNames = []string{name}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &keys.server.PublicKey, keys.ca)
	if err != nil {
		return nil, err
	}
	cert := tls.Certificate{Certificate: [][]byte{leafDER, caDER}, PrivateKey: keys.server}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, ClientAuth: tls.RequestClientCert}, nil
}

// servingKeys are the kubelets' serving key pairs: the CA's and the
// server certificate's, made on first use.
var servingKeys = sync.OnceValues(func() (struct{ ca, server *rsa.PrivateKey }, error) {
	var k struct{ ca, server *rsa.PrivateKey }
	var err error
	if k.ca, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return k, err
	}
	k.server, err = rsa.GenerateKey(rand.Reader, 2048)
	return k, err
})

// serialNumber is a random serial in [1, 2^63-1).
func serialNumber() *big.Int {
	n, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64-1))
	if err != nil {
		// crypto/rand does not fail (Go 1.24+).
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}
