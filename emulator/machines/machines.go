// Package machines is the local world's machine runtime: when the ARM
// emulator has provisioned a VM or scale-set instance, it boots it from
// its custom data as cloud-init or cloudbase-init would. A first
// control-plane machine runs a real control plane; a worker joins as
// kubeadm join does and runs a simulated kubelet of its OS.
package machines

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/azuredisk"
	"github.com/winkube/winkube/emulator/machines/bootagent"
	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/controlplane"
	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/join"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/kubeproxy"
	"github.com/winkube/winkube/emulator/machines/sshd"
	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// Options configure a Runtime.
type Options struct {
	// Bin holds the control-plane binaries and kubeadm.
	Bin string
	// Versions holds further control-plane binaries (kube-apiserver,
	// kube-controller-manager, kube-scheduler, kubeadm) by the Kubernetes
	// version they are ("v1.35.4"): a control-plane machine whose
	// ClusterConfiguration names one runs them, as a VM runs what its
	// image installed; any other version runs Bin's. etcd is always Bin's.
	Versions map[string]string
	// Dir holds each machine's disk; a machine's folder is removed when
	// the machine is deleted.
	Dir string
	// Network maps private addresses to host addresses.
	Network *hostnet.Network
	// Images is the registry pods pull from.
	Images kubelet.Images
	// Cloud, when set, reaches the Azure network where the clusters' cloud
	// controllers program load balancers for LoadBalancer Services, with
	// the credential each cluster's cloud config names; ARMNetwork makes
	// one that calls the emulator.
	Cloud func(cloudprovider.Credentials) (cloudprovider.Network, error)
	// Compute, when set, reaches Azure's compute RP where the clusters'
	// Azure Disk CSI controllers create and attach managed disks, with the
	// credential their cloud config names; ARMCompute makes one that calls
	// the emulator.
	Compute func(cloudprovider.Credentials, string) (*armcompute.ClientFactory, error)
	// JoinTimeout bounds a worker's wait for its control plane (10m):
	// kubeadm join's discovery timeout, longer than kubeadm's 5m default
	// because local workers boot with their control plane.
	JoinTimeout time.Duration
	// KubeletHealthCheckTimeout is how long kubeadm join waits for a
	// kubelet that does not come up (kubeadm v1.36's default, 4m).
	KubeletHealthCheckTimeout time.Duration
	// Events receives a line per boot step, for progress displays.
	Events func(machine, msg string)
	Log    logr.Logger
}

// Runtime implements arm.MachineRuntime.
type Runtime struct {
	opts     Options
	mu       sync.Mutex
	machines map[string]*machine
	clusters map[string]*workloadCluster
	// halted are the disks of machines switched off (stopped or
	// deallocated VMs), by machine ID: a Boot starts from them.
	halted map[string]string
	// skipped are the load-balancing rules said to carry nothing.
	skipped map[string]bool
	proxies kubeProxies
}

type machine struct {
	arm      arm.Machine
	nodeName string
	dir      string
	endpoint string
	cancel   context.CancelFunc
	booted   chan struct{}
	cp       *controlplane.ControlPlane
	kubelet  *kubelet.Kubelet
	proxy    *kubeproxy.Node
	// podRoutes is when the node's CNI agent had its pod routes in sync
	// since this boot (podRoute); guarded by Runtime.mu.
	podRoutes routeSpan
	// proxyNode is what the node's kube-proxy is started with, kept while
	// the kubelet runs: a node that registers before its cluster's control
	// plane is known to this runtime (machines booting again after a
	// restart come up in any order) gets its proxy once it is.
	proxyNode *kubeproxy.NodeConfig
	// installed is what the node's pods last said they installed.
	installed map[string]bool
	// sessions are the node's running system components' own lists and
	// watches, by pod (rights.go).
	sessions map[types.UID][]*componentSession
	// podCIDR is the node's pod CIDR, as its kubelet hands addresses out.
	podCIDR func() netip.Prefix
	// podBackend is how the node's CNI agent carries pod packets to other
	// nodes, as it read its configuration when it started ("host-gw",
	// "vxlan"; "" while none said: encapsulated, as before).
	podBackend string
	// providerID is what the node's spec.providerID is set to.
	providerID string
	// logs are the machine's service logs on its disk.
	logs           *vmdisk.Logs
	sshd           *sshd.Server
	nat            [][2]string // frontend, backend
	kubeletVersion string
	// ctx and host are a plain machine's boot context and host address,
	// for the kubelet a join by hand starts (handjoin.go).
	ctx  context.Context
	host netip.Addr
	// containerd is the containerd release a join by hand installed; ""
	// for the node image's.
	containerd string
	// off is set when the machine is switched off (stop), under
	// Runtime.mu: a join by hand runs in a shell session, not in the
	// boot stop waits for, so its kubelet may come up after stop looked
	// for one to stop.
	off bool
}

// workloadCluster is what the runtime keeps per control-plane endpoint.
type workloadCluster struct {
	admin *rest.Config
	cloud *cloudprovider.Controller
	// disks is the Azure Disk CSI driver's controller.
	disks *azuredisk.Controller
	// grants are the permissions its API server granted its nodes'
	// components, shared by their kubelets' checks.
	grants *startneeds.Grants
}

var _ arm.MachineRuntime = (*Runtime)(nil)

// New returns a runtime.
func New(opts Options) (*Runtime, error) {
	if opts.Network == nil || opts.Images == nil {
		return nil, errors.New("machine runtime needs a host network and an image registry")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubeadm"} {
		if _, err := os.Stat(filepath.Join(opts.Bin, b)); err != nil {
			return nil, fmt.Errorf("machine runtime: %s is missing from %s (run `make tools`)", b, opts.Bin)
		}
	}
	for v, dir := range opts.Versions {
		for _, b := range controlplane.VersionedBinaries {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return nil, fmt.Errorf("machine runtime: %s of Kubernetes %s is missing from %s (run `make tools`)", b, v, dir)
			}
		}
	}
	if opts.JoinTimeout == 0 {
		opts.JoinTimeout = 10 * time.Minute
	}
	if opts.KubeletHealthCheckTimeout == 0 {
		opts.KubeletHealthCheckTimeout = 4 * time.Minute
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &Runtime{opts: opts, machines: map[string]*machine{}, clusters: map[string]*workloadCluster{}, halted: map[string]string{}, proxies: kubeProxies{all: map[string]*sharedProxy{}}}, nil
}

func key(id string) string { return strings.ToLower(id) }

// metadataOf is what the machine's instance metadata says of it: the
// emulator's VM, with the subscription of its ARM ID.
func metadataOf(am arm.Machine) cloudprovider.Metadata {
	var sub string
	if seg := strings.Split(am.ID, "/"); len(seg) > 2 && strings.EqualFold(seg[1], "subscriptions") {
		sub = seg[2]
	}
	return cloudprovider.Metadata{SubscriptionID: sub, ResourceGroup: am.ResourceGroup, Name: am.Name, ScaleSet: am.ScaleSet, InstanceID: am.InstanceID}
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

func (r *Runtime) event(m *machine, msg string) {
	r.opts.Log.Info(msg, "machine", m.arm.Name)
	m.logs.Write(vmdisk.Boot, "%s", msg)
	if r.opts.Events != nil {
		r.opts.Events(m.arm.Name, msg)
	}
}

// Boot boots a machine and returns once its node is registered (or the
// boot failed, which the emulator shows in the VM's instance view).
func (r *Runtime) Boot(ctx context.Context, am arm.Machine) error {
	ctx, cancel := context.WithCancel(ctx)
	m := &machine{arm: am, cancel: cancel, booted: make(chan struct{}), providerID: cloudprovider.ProviderID(metadataOf(am))}
	name := am.Name
	if am.InstanceID != "" {
		name = am.ScaleSet + "_" + am.InstanceID
	}
	m.dir = filepath.Join(r.opts.Dir, unsafeName.ReplaceAllString(strings.ToLower(am.ResourceGroup+"-"+name), "-"))
	m.logs = vmdisk.NewLogs(m.disk(""))
	r.mu.Lock()
	delete(r.halted, key(am.ID)) // started again: its disk is m.dir
	if old, ok := r.machines[key(am.ID)]; ok {
		r.mu.Unlock()
		r.stop(old) // reimaged: the old disk goes
		_ = os.RemoveAll(old.dir)
		r.mu.Lock()
	}
	r.machines[key(am.ID)] = m
	r.mu.Unlock()
	defer close(m.booted)
	err := r.boot(ctx, m)
	if err != nil {
		r.event(m, "boot failed: "+err.Error())
		return err
	}
	return nil
}

func (r *Runtime) boot(ctx context.Context, m *machine) error {
	am := m.arm
	if len(am.PrivateIPs) == 0 {
		return errors.New("the machine has no private IP address to run on")
	}
	host, err := r.opts.Network.HostAddress(am.PrivateIPs[0])
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return err
	}
	b, perr := bootdata.Parse(am.CustomData, bootdata.Metadata{LocalHostname: m.hostname()})
	logBootData(m, b)
	if err := r.startAccess(m, b, host); err != nil {
		// As on a VM whose sshd fails: it boots on, unreachable by SSH.
		r.event(m, "ssh: "+err.Error()+"; the machine boots on without SSH access")
	}
	if perr != nil {
		return fmt.Errorf("cloud-init: %w", perr)
	}
	switch b.Role {
	case bootdata.Plain:
		return r.bootPlain(ctx, m, b, host)
	case bootdata.Init:
		return r.bootControlPlane(ctx, m, b, host, nil)
	case bootdata.JoinControlPlane:
		j, err := r.discoverForControlPlane(ctx, m, b)
		if err != nil {
			return err
		}
		return r.bootControlPlane(ctx, m, b, host, j)
	default:
		return r.bootWorker(ctx, m, b, host)
	}
}

// discoverForControlPlane finds the cluster a further control-plane machine
// joins; a machine booting again has what it needs on its disk.
func (r *Runtime) discoverForControlPlane(ctx context.Context, m *machine, b *bootdata.BootData) (*controlplane.Join, error) {
	if _, err := os.Stat(filepath.Join(m.dir, "kubeadm.yaml")); err == nil {
		return &controlplane.Join{}, nil
	}
	bt := b.Kubeadm.Join.Discovery.BootstrapToken
	if bt == nil {
		return nil, errors.New("JoinConfiguration has no bootstrapToken discovery: file discovery is not supported by winkube's machine runtime")
	}
	r.event(m, "discovering the cluster at "+bt.APIServerEndpoint+" to join its control plane")
	dctx, cancel := context.WithTimeout(ctx, r.opts.JoinTimeout)
	defer cancel()
	cl, err := join.Discover(dctx, join.Discovery{Endpoint: bt.APIServerEndpoint, Token: bt.Token, CACertHashes: bt.CACertHashes, UnsafeSkipCAVerification: bt.UnsafeSkipCAVerification})
	if err != nil {
		return nil, err
	}
	return &controlplane.Join{Token: &rest.Config{Host: cl.Server, BearerToken: bt.Token, TLSClientConfig: rest.TLSClientConfig{CAData: cl.CAData}, Timeout: 30 * time.Second}}, nil
}

func nodeName(reg bootdata.NodeRegistration, fallback string) string {
	if reg.Name != "" {
		return strings.ToLower(reg.Name)
	}
	return strings.ToLower(fallback)
}

func (r *Runtime) bootControlPlane(ctx context.Context, m *machine, b *bootdata.BootData, host netip.Addr, j *controlplane.Join) error {
	reg := b.Kubeadm.NodeRegistration()
	m.nodeName = nodeName(reg, m.arm.ComputerName)
	if m.windows() {
		return errors.New("a Windows machine cannot run a Kubernetes control plane")
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{
		Bin: r.opts.Bin, Versions: r.opts.Versions, Dir: m.dir, NodeName: m.nodeName, PrivateIP: m.arm.PrivateIPs[0], Host: host, Boot: b, Join: j,
		Progress: func(s string) { r.event(m, s) },
		// The API server reaches Services and pods as from this machine.
		Dial: r.nodeDial(m),
	})
	if err != nil {
		return err
	}
	// Under the lock: the API server's egress reads it as it dials.
	r.mu.Lock()
	m.endpoint = cp.Endpoint
	r.mu.Unlock()
	if _, _, err := net.SplitHostPort(m.endpoint); err != nil {
		cp.Stop()
		return fmt.Errorf("ClusterConfiguration.controlPlaneEndpoint %q is not host:port", m.endpoint)
	}
	// The API server's load balancer reaches this machine through its
	// rule and probe, once the machine's NIC is in its backend pool
	// (dataplane.go).
	r.mu.Lock()
	m.cp = cp
	err = r.ensureCloud(m)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	nodeClient, err := kubeletClient(cp.Kubelet)
	if err != nil {
		return err
	}
	procs := map[string]kubelet.Process{}
	for name, p := range cp.Processes() {
		procs[name] = p
	}
	if err := r.startKubelet(ctx, m, nodeClient, clusterCA(cp.Kubelet), reg, cp.StaticPods, procs, host, cp.KubernetesVersion()); err != nil {
		return err
	}
	r.event(m, "marking the node as control plane")
	return cp.MarkControlPlane(ctx)
}

// bootWorker runs the boot data through the machine's agent, whose
// script runs kubeadm join; a machine booting again keeps the credentials
// of its first join, as cloud-init runs once per instance.
func (r *Runtime) bootWorker(ctx context.Context, m *machine, b *bootdata.BootData, host netip.Addr) error {
	j := b.Kubeadm.Join
	m.nodeName = nodeName(j.NodeRegistration, m.arm.ComputerName)
	if bt := j.Discovery.BootstrapToken; bt != nil {
		m.endpoint = bt.APIServerEndpoint
	}
	reg := j.NodeRegistration
	cfg, err := join.LoadKubeconfig(filepath.Join(m.dir, "root", "etc", "kubernetes", "kubelet.conf"))
	if err == nil {
		r.event(m, "booting again with the node's credentials from its first join")
	} else {
		var done joined
		var failed error
		agent := &bootagent.Agent{Windows: m.windows(), Disk: m.disk(""), Logs: m.logs, Kubeadm: r.kubeadmJoin(m, &done, &failed)}
		res := agent.Run(ctx, b)
		switch {
		case done.cfg != nil:
			cfg, reg = done.cfg, done.reg
		case ctx.Err() != nil:
			return ctx.Err()
		case failed != nil:
			return failed
		case !res.KubeadmRan:
			return fmt.Errorf("%s: the runcmd script ended with status %d before it ran kubeadm join", agentName(m), res.ExitStatus)
		default:
			return fmt.Errorf("%s: kubeadm join did not join the node", agentName(m))
		}
	}
	client, err := kubeletClient(cfg)
	if err != nil {
		return err
	}
	version := ""
	if v, err := client.Discovery().ServerVersion(); err == nil {
		version = v.GitVersion
	}
	return r.startKubelet(ctx, m, client, clusterCA(cfg), reg, nil, nil, host, version)
}

// kubeletClient is the kubelet's client of the API server from its
// kubeconfig, with the overrides the kubelet applies to it
// (kubeClientConfigOverrides and setContentTypeForClient,
// cmd/kubelet/app/server.go, kubernetes v1.36.3) at their defaults
// (pkg/kubelet/apis/config/v1beta1/defaults.go): it sends protobuf and
// accepts protobuf before JSON, so the API server encodes the node's watch
// events and decodes its status and lease writes as it does for a real
// kubelet, at 50 requests a second with a burst of 100.
func kubeletClient(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.QPS, c.Burst = 50, 100
	return kubernetes.NewForConfig(c)
}

// clusterCA is the cluster CA the node's kubeconfig trusts: kubeadm makes
// it the kubelet's client CA (KubeletConfiguration
// authentication.x509.clientCAFile, /etc/kubernetes/pki/ca.crt), so that
// the API server's kubelet client certificate, which it signed,
// authenticates to the kubelet API. Nil when the kubeconfig names none:
// the kubelet then accepts no client certificate.
func clusterCA(cfg *rest.Config) *x509.CertPool {
	data := cfg.CAData
	if len(data) == 0 && cfg.CAFile != "" {
		data, _ = os.ReadFile(cfg.CAFile)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil
	}
	return pool
}

func agentName(m *machine) string {
	if m.windows() {
		return "cloudbase-init"
	}
	return "cloud-init"
}

// startKubelet registers the node as a kubelet of the machine's OS would.
func (r *Runtime) startKubelet(ctx context.Context, m *machine, client kubernetes.Interface, clientCA *x509.CertPool, reg bootdata.NodeRegistration, static []*corev1.Pod, procs map[string]kubelet.Process, host netip.Addr, clusterVersion string) error {
	if r.switchedOff(m) {
		return errSwitchedOff
	}
	am := m.arm
	h := kubelet.Host{OS: "linux", Arch: "amd64"}
	info := corev1.NodeSystemInfo{
		OperatingSystem: "linux", Architecture: "amd64", OSImage: "Ubuntu 24.04.1 LTS", KernelVersion: "6.8.0-1021-azure",
		ContainerRuntimeVersion: "containerd://1.7.24", MachineID: machineID(am.ID), SystemUUID: machineID(am.ID + "/uuid"), BootID: machineID(am.ID + time.Now().String()),
	}
	if m.containerd != "" {
		info.ContainerRuntimeVersion = "containerd://" + m.containerd
	}
	// With --cloud-provider=external the kubelet leaves the cloud's labels
	// (region, zone, instance type) to the cloud node manager.
	labels := map[string]string{"kubernetes.io/hostname": m.nodeName}
	if m.windows() {
		rel, err := windowsReleaseOf(am.Image)
		if err != nil {
			return err
		}
		wb := windowsBuilds[rel]
		h = kubelet.Host{OS: "windows", Arch: "amd64", Build: wb.build}
		info.OperatingSystem, info.OSImage, info.KernelVersion = "windows", wb.name, wb.build+"."+wb.revision
		labels["node.kubernetes.io/windows-build"] = wb.build
	}
	labels["kubernetes.io/os"], labels["kubernetes.io/arch"] = h.OS, h.Arch
	labels["beta.kubernetes.io/os"], labels["beta.kubernetes.io/arch"] = h.OS, h.Arch
	info.KubeletVersion = kubeletVersionOf(am.Image)
	if info.KubeletVersion == "" {
		info.KubeletVersion = clusterVersion
	}
	// The kubelet checks pods against its own version, flags and runtime.
	h.KubeletVersion, h.FeatureGates, h.Runtime = info.KubeletVersion, featureGates(reg), "containerd"
	if strings.Contains(reg.CRISocket, "dockershim") {
		h.Runtime, info.ContainerRuntimeVersion = "dockershim", "docker://20.10.24"
	}
	taints, err := registerTaints(reg)
	if err != nil {
		return err
	}
	r.event(m, fmt.Sprintf("kubelet registering node %s (%s, %s)", m.nodeName, h.OS, host))
	check, started := r.componentHooks(ctx, m, host.String(), h.OS, containerruntime.Node{
		Name: m.nodeName, OS: h.OS, Build: h.Build, Containerd: strings.TrimPrefix(info.ContainerRuntimeVersion, "containerd://"),
		Disk: m.disk(""), Dial: r.nodeDial(m), HNS: machineHNS{r, m},
	})
	r.mu.Lock()
	m.proxyNode = &kubeproxy.NodeConfig{NodeName: m.nodeName, Address: host, Windows: m.windows(), KernelVersion: info.KernelVersion, Logs: m.logs,
		HNSNetworkType: machineHNS{r, m}.networkType}
	r.mu.Unlock()
	r.ensureProxy(m)
	k, err := kubelet.Start(ctx, kubelet.Config{
		NodeName: m.nodeName, Client: client, ClientCA: clientCA, Address: host, Host: h, Labels: labels, Taints: taints,
		Capacity: capacity(am), NodeInfo: info, StaticPods: static, StaticProcesses: procs, Images: r.opts.Images, Logs: m.logs,
		StartCheck: check, Started: started, PodAddress: r.podAddress(m.endpoint), Disk: m.disk(""),
		NetworkConfigured: cniConfigured(m), SetUpNetwork: cniAdd(m),
		NetworkAddressed: r.cniNetworkAddressed(m), TearDownNetwork: r.cniTearDown(m),
		Installed: func(what map[string]bool) { r.setInstalled(m, what) },
		Egress:    egress(am),
		PodDial:   r.podDial(m),
		Run:       r.realPrograms(m),
		CSIPlugin: r.csiPlugins(m),
		Stopped:   func(uid types.UID) { r.stopSessions(m, uid) },
		ExecProbe: r.execProbe(m),
		Log:       r.opts.Log.WithName("kubelet").WithValues("node", m.nodeName),
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	if m.off {
		r.mu.Unlock()
		k.Stop()
		r.stopProxy(m)
		return errSwitchedOff
	}
	m.kubelet, m.kubeletVersion, m.podCIDR = k, info.KubeletVersion, k.PodCIDR
	r.mu.Unlock()
	return nil
}

var errSwitchedOff = errors.New("the machine was switched off: its kubelet does not run")

func (r *Runtime) switchedOff(m *machine) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m.off
}

// egress is the machine's way to the internet, asked of the emulator each
// time (a NAT gateway may be attached to its subnet after it booted); a
// machine the emulator gave no Outbound reaches everything.
func egress(am arm.Machine) func(protocol string) error {
	if am.Outbound == nil {
		return nil
	}
	return func(protocol string) error {
		e, err := am.Outbound(protocol)
		if err != nil {
			return err
		}
		if e.None() {
			return fmt.Errorf("%s has no outbound connectivity for %s", am.Name, protocol)
		}
		return nil
	}
}

// podAddress is where the pods of the cluster at endpoint are reached on
// this machine: a host address per pod IP, keyed by the cluster since
// pod CIDRs of different clusters may overlap.
func (r *Runtime) podAddress(endpoint string) func(string) (netip.Addr, error) {
	return func(podIP string) (netip.Addr, error) {
		return r.opts.Network.HostAddress("pod/" + endpoint + "/" + podIP)
	}
}

// featureGates are the kubelet's --feature-gates ("A=true,B=false").
func featureGates(reg bootdata.NodeRegistration) map[string]bool {
	v, _ := reg.KubeletExtraArgs.Get("feature-gates")
	out := map[string]bool{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if b, err := strconv.ParseBool(strings.TrimSpace(val)); ok && err == nil {
			out[strings.TrimSpace(k)] = b
		}
	}
	return out
}

// registerTaints are the kubelet's --register-with-taints, and the taint
// an external cloud provider's kubelet adds until the cloud initializes it.
func registerTaints(reg bootdata.NodeRegistration) ([]corev1.Taint, error) {
	var out []corev1.Taint
	add := func(t corev1.Taint) {
		for _, o := range out {
			if o.Key == t.Key && o.Effect == t.Effect {
				return
			}
		}
		out = append(out, t)
	}
	if v, ok := reg.KubeletExtraArgs.Get("register-with-taints"); ok && v != "" {
		for _, s := range strings.Split(v, ",") {
			kv, effect, ok := strings.Cut(strings.TrimSpace(s), ":")
			if !ok {
				return nil, fmt.Errorf("kubelet --register-with-taints %q: %q has no effect", v, s)
			}
			k, val, _ := strings.Cut(kv, "=")
			add(corev1.Taint{Key: k, Value: val, Effect: corev1.TaintEffect(effect)})
		}
	}
	if reg.Taints != nil {
		for _, t := range *reg.Taints {
			add(corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
		}
	}
	if v, _ := reg.KubeletExtraArgs.Get("cloud-provider"); v == "external" {
		add(corev1.Taint{Key: cloudprovider.UninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	}
	return out, nil
}

func machineID(s string) string {
	const hex = "0123456789abcdef"
	var h uint64 = 1469598103934665603
	out := make([]byte, 32)
	for i := range out {
		for _, c := range []byte(s) {
			h = (h ^ uint64(c)) * 1099511628211
		}
		h ^= uint64(i)
		out[i] = hex[h%16]
	}
	return string(out)
}

// Halt switches a machine off and keeps its disk, as a stopped or
// deallocated VM: its kubelet stops, so its Node goes NotReady once its
// lease expires, and a later Boot starts it from the same disk.
func (r *Runtime) Halt(_ context.Context, id string) error {
	r.mu.Lock()
	m, ok := r.machines[key(id)]
	if ok {
		delete(r.machines, key(id))
		r.halted[key(id)] = m.dir
	}
	r.mu.Unlock()
	if ok {
		r.stop(m)
	}
	return nil
}

// Stop stops a machine's processes and removes its disk: the VM is gone.
func (r *Runtime) Stop(_ context.Context, id string) error {
	r.mu.Lock()
	m, ok := r.machines[key(id)]
	if ok {
		delete(r.machines, key(id))
	}
	dir, halted := r.halted[key(id)]
	delete(r.halted, key(id))
	r.mu.Unlock()
	if halted {
		_ = os.RemoveAll(dir)
	}
	if !ok {
		return nil
	}
	r.stop(m)
	_ = os.RemoveAll(m.dir)
	return nil
}

// stop switches a machine off; its disk stays.
func (r *Runtime) stop(m *machine) {
	m.cancel()
	<-m.booted
	r.mu.Lock()
	m.off = true
	k, cp := m.kubelet, m.cp
	var wc *workloadCluster
	if cp != nil {
		if wc = r.clusters[m.endpoint]; wc != nil && wc.admin == cp.SuperAdmin {
			delete(r.clusters, m.endpoint)
		} else {
			wc = nil
		}
	}
	r.mu.Unlock()
	if k != nil {
		k.Stop()
	}
	r.stopAllSessions(m)
	r.stopProxy(m)
	r.stopAccess(m)
	if wc != nil {
		wc.cloud.Stop()
		wc.disks.Stop()
	}
	if cp != nil {
		cp.Stop()
	}
	if wc != nil {
		r.handOverCloud(m.endpoint)
	}
}

// ensureCloud runs the cluster's cloud controller on control-plane machine
// m unless one already runs: one per cluster, run by one of its control
// planes. The caller holds r.mu.
func (r *Runtime) ensureCloud(m *machine) error {
	if r.clusters[m.endpoint] != nil {
		return nil
	}
	admin, err := kubernetes.NewForConfig(m.cp.SuperAdmin)
	if err != nil {
		return err
	}
	r.clusters[m.endpoint] = &workloadCluster{admin: m.cp.SuperAdmin, grants: &startneeds.Grants{TTL: 30 * time.Second}, cloud: cloudprovider.Start(cloudprovider.Config{
		Client: admin, Images: ccmImage, Synced: r.ccmSynced, Instances: machineInstances{r}, Connect: r.opts.Cloud, IMDS: r.nodeIMDS(m.endpoint),
		ReadNodeFile: r.nodeFiles(m.endpoint), PrivateIP: r.privateIP,
		Log: r.opts.Log.WithName("cloud").WithValues("endpoint", m.endpoint),
	}), disks: azuredisk.StartController(azuredisk.ControllerConfig{
		Client: admin, PodClient: podClient(m.cp.SuperAdmin, admin), Synced: r.sidecarSynced, Role: azureDiskRole, ReadNodeFile: r.nodeFiles(m.endpoint), IMDS: r.nodeIMDS(m.endpoint), Connect: r.opts.Compute,
		Log: r.opts.Log.WithName("azuredisk").WithValues("endpoint", m.endpoint),
	})}
	// Nodes of this cluster that registered before it was known get
	// their kube-proxy now.
	for _, o := range r.machines {
		if o.endpoint == m.endpoint && o.proxy == nil && o.proxyNode != nil {
			go r.ensureProxy(o)
		}
	}
	return nil
}

// handOverCloud moves the cluster's cloud controller to another of its
// control-plane machines, if one runs, when the one running it goes.
func (r *Runtime) handOverCloud(endpoint string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.machines {
		if o.cp != nil && o.endpoint == endpoint && r.ensureCloud(o) == nil {
			return
		}
	}
}

// Close switches every machine off and forgets it, keeping the disks, as
// when the host running the VMs shuts down: nothing keeps running, and a
// machine booted again later finds its disk.
func (r *Runtime) Close() {
	r.mu.Lock()
	ms := make([]*machine, 0, len(r.machines))
	for id, m := range r.machines {
		ms = append(ms, m)
		delete(r.machines, id)
	}
	r.halted = map[string]string{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() { defer wg.Done(); r.stop(m) }()
	}
	wg.Wait()
}

// Node is what the runtime tells of a booted machine.
type Node struct {
	Machine  string
	NodeName string
	Host     netip.Addr
	// Dir is the machine's disk.
	Dir string
	// Pids are a control plane's processes.
	Pids map[string]int
	// APIServer is a control plane's own kube-apiserver (host:port).
	APIServer string
}

// Nodes lists the machines booted so far.
func (r *Runtime) Nodes() []Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Node
	for _, m := range r.machines {
		n := Node{Machine: m.arm.Name, NodeName: m.nodeName, Dir: m.dir}
		if len(m.arm.PrivateIPs) > 0 {
			n.Host, _ = r.opts.Network.HostAddress(m.arm.PrivateIPs[0])
		}
		if m.cp != nil {
			n.Pids, n.APIServer = m.cp.Pids(), m.cp.APIServer
		}
		out = append(out, n)
	}
	return out
}
