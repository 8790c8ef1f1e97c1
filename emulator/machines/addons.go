package machines

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

// readNodeFile reads a file of the machine's own filesystem.
func readNodeFile(m *machine) func(string) ([]byte, error) {
	disk := m.disk("")
	return func(path string) ([]byte, error) {
		p, err := disk.HostPath(path)
		if err != nil {
			return nil, err
		}
		return os.ReadFile(p)
	}
}

// instance is what the machine's instance metadata tells a cloud node
// manager running on it.
func instance(m *machine, host string) cloudprovider.Instance {
	am := m.arm
	return cloudprovider.Instance{
		ProviderID: m.providerID, InstanceType: am.VMSize, Region: strings.ToLower(am.Location), Zone: zoneLabel(am),
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}, {Type: corev1.NodeHostName, Address: m.nodeName}},
	}
}

// componentHooks hold the node's kubelet to what the system components it
// runs need (checked against the cluster's API server as its
// administrator), and carry out what a running cloud node manager does.
func (r *Runtime) componentHooks(ctx context.Context, m *machine, host, os string, pnode containerruntime.Node) (kubelet.StartCheck, func(context.Context, *corev1.Pod)) {
	// The cluster is looked up at each start, not once: a world resuming
	// boots every machine at once, and a node's kubelet may start before
	// its control plane is known here (as ensureCloud's kube-proxy
	// catch-up says); a control plane taking over makes a new one.
	var mu sync.Mutex
	var known *workloadCluster
	var admin, kubeletReads kubernetes.Interface
	var checker *startneeds.Checker
	// stopReads ends the watches of the cluster known before (its
	// ConfigMaps, its Services) when another takes over.
	stopReads := func() {}
	logged := false
	cluster := func() (kubernetes.Interface, kubernetes.Interface, *startneeds.Checker, *workloadCluster) {
		r.mu.Lock()
		wc := r.clusters[m.endpoint]
		r.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		if wc == nil {
			if !logged {
				m.logs.Write(vmdisk.Kubelet, "the cluster's control plane is not run here (yet): system components are not checked")
				logged = true
			}
			return nil, nil, nil, nil
		}
		if wc != known {
			a, err := kubernetes.NewForConfig(wc.admin)
			if err != nil {
				return nil, nil, nil, nil
			}
			// What the kubelet itself reads before a container starts
			// (the ConfigMaps its environment and volumes name, the
			// Services its environment's variables come from) comes
			// from the node's own watches of them, as the kubelet's
			// ConfigMap manager and service lister keep them. One
			// catalog for every node (it is read only) and the
			// cluster's grants.
			stopReads()
			rctx, cancel := context.WithCancel(ctx)
			stopReads = cancel
			reads := kubelet.Reads(a, rctx.Done())
			known, admin, kubeletReads, checker = wc, a, reads, &startneeds.Checker{Client: reads, Components: catalog().Components, Grants: wc.grants}
		}
		return admin, kubeletReads, checker, known
	}
	node := startneeds.Node{OS: os, ReadFile: readNodeFile(m)}
	check := func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, img *kubelet.Pulled) error {
		admin, kubeletReads, checker, wc := cluster()
		if wc == nil {
			// A component that lists and watches (Felix, kube-proxy)
			// acts through its session, which only a known cluster
			// gives it. On a resume a worker's kubelet reaches the API
			// server through the load balancer before its control-plane
			// machine has run kubeadm's last phases and the cluster is
			// known here: started now, the container would run without
			// a session for good, and no other node would route to this
			// node's pods. Held and asked again, it starts with one. A
			// real Felix in that window runs and retries its datastore;
			// its pod is not Ready either way.
			if comp := catalog().Find(os, *c); comp != nil && len(comp.Watches) > 0 {
				return &kubelet.Waiting{Message: "the cluster's control plane is not run here yet", Every: time.Second}
			}
			return nil
		}
		f, err := checker.Check(ctx, node, pod, *c)
		if err != nil {
			// The API server did not answer: the process would not get
			// far either.
			return err
		}
		if f != nil {
			if f.Component != "" {
				m.logs.Write(vmdisk.Kubelet, "%s (%s) in pod %s/%s cannot start: missing %s", f.Component, c.Name, pod.Namespace, pod.Name, f.Missing)
			}
			return errors.New(f.Message)
		}
		r.mu.Lock()
		installed := m.installed
		r.mu.Unlock()
		logs, err := azureDiskProxyCheck(os == "windows", installed, *c)
		for _, l := range logs {
			m.logs.Write(vmdisk.Containerd, "%s/%s %s: %s", pod.Namespace, pod.Name, c.Name, l)
		}
		if err != nil {
			return err
		}
		if img != nil && img.Process != nil {
			if err := startProcess(ctx, kubeletReads, m, pnode, pod, c, *img.Process); err != nil {
				return err
			}
		} else if img != nil && os == "windows" && len(c.Command) > 0 && kubelet.HostProcessPod(pod) {
			// A HostProcess container runs its command on the host,
			// with the host's programs (cmd, PowerShell), whatever
			// its image holds.
			if err := startProcess(ctx, kubeletReads, m, pnode, pod, c, registry.Process{}); err != nil {
				return err
			}
		}
		// The process runs: what it lists and watches, it does with its
		// pod's credentials.
		comp := checker.Find(os, *c)
		r.startSession(m, wc, comp, pod, *c)
		if comp != nil && comp.Effect == startneeds.EffectPodNetwork {
			r.learnPodBackend(ctx, admin, m, pod, *c)
		}
		return nil
	}
	started := func(_ context.Context, pod *corev1.Pod) {
		if _, _, checker, wc := cluster(); wc == nil || checker.Effect(os, pod) != startneeds.EffectInitializesNode {
			return
		}
		r.initializeNode(m, host, pod)
	}
	return check, started
}

// startProcess starts the container's process by the image's
// configuration, as containerd would, and tells the kubelet what became
// of it.
func startProcess(ctx context.Context, admin kubernetes.Interface, m *machine, pnode containerruntime.Node, pod *corev1.Pod, c *corev1.Container, pr registry.Process) error {
	env, err := containerruntime.Environment(ctx, admin, pod, *c)
	if err != nil {
		return err
	}
	mounts, err := containerruntime.Mounts(ctx, admin, pnode.Disk, pod, *c)
	if err != nil {
		return err
	}
	out := containerruntime.Start(ctx, pnode, containerruntime.Image{Entrypoint: pr.Entrypoint, Cmd: pr.Cmd, WorkingDir: pr.WorkingDir, Env: pr.Env, User: pr.User, Files: pr.Files},
		containerruntime.Container{ID: containerruntime.ContainerID(pod, c.Name), Pod: pod, Spec: *c, Env: env, Mounts: mounts, Memory: kubelet.ProcessMemory(ctx)})
	who := fmt.Sprintf("%s/%s %s", pod.Namespace, pod.Name, c.Name)
	for _, l := range out.Log {
		m.logs.Write(vmdisk.Containerd, "%s: %s", who, l)
	}
	switch out.State {
	case containerruntime.Exits:
		m.logs.Write(vmdisk.Containerd, "%s exited with code %d: %s", who, out.Code, out.Message)
		return &kubelet.Exited{Code: out.Code, Message: out.Message}
	case containerruntime.Ends:
		m.logs.Write(vmdisk.Containerd, "%s ended with exit code %d", who, out.Code)
		return &kubelet.Ended{Code: out.Code, Output: out.Log}
	case containerruntime.Waits:
		return &kubelet.Waiting{Message: out.Message, Every: out.Every, Memory: out.Memory}
	case containerruntime.Pauses:
		return &kubelet.RunsUntilStopped{}
	case containerruntime.StartFails:
		m.logs.Write(vmdisk.Containerd, "StartContainer for %s failed: %s", who, out.Message)
		return &kubelet.StartFailure{Message: out.Message}
	}
	return nil
}

// machineHNS is the machine's Host Networking Service, kept by its
// kubelet.
type machineHNS struct {
	r *Runtime
	m *machine
}

func (h machineHNS) kubelet() *kubelet.Kubelet {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return h.m.kubelet
}

func (h machineHNS) Network(name string) (string, bool) {
	if k := h.kubelet(); k != nil {
		return k.HNSNetwork(name)
	}
	return "", false
}

// networkType is the type of the node's HNS network ("" before its CNI
// made one), as kube-proxy reads it when it starts.
func (h machineHNS) networkType() string {
	if k := h.kubelet(); k != nil {
		if nets, _ := k.HNS(); len(nets) > 0 {
			return nets[0].Type
		}
	}
	return ""
}

func (h machineHNS) CreateNetwork(name, typ string) {
	if k := h.kubelet(); k != nil {
		k.CreateHNSNetwork(context.Background(), name, typ)
	}
}

// cniConfDir is where the node image's containerd reads CNI network
// configurations, and cniBinDir where the plugins go: /etc/cni/net.d and
// /opt/cni/bin on Linux, C:\etc\cni\net.d and C:\opt\cni\bin on
// CAPZ's Windows images (kubernetes-sigs/image-builder's containerd
// config.toml for Windows, ae63061e).
func cniConfDir(m *machine) string {
	if m.windows() {
		return `C:\etc\cni\net.d`
	}
	return "/etc/cni/net.d"
}

func cniBinDir(m *machine) string {
	if m.windows() {
		return `C:\opt\cni\bin`
	}
	return "/opt/cni/bin"
}

// cniConfigured says whether the node's CNI configuration directory
// holds a network configuration, as containerd's CNI loader looks for
// one (*.conf, *.conflist, *.json). The node image ships both
// directories, empty.
func cniConfigured(m *machine) func() bool {
	disk := m.disk("")
	for _, d := range []string{cniConfDir(m), cniBinDir(m)} {
		if hp, err := disk.HostPath(d); err == nil {
			_ = os.MkdirAll(hp, 0o755)
		}
	}
	return func() bool {
		hp, err := disk.HostPath(cniConfDir(m))
		if err != nil {
			return false
		}
		entries, err := os.ReadDir(hp)
		if err != nil {
			return false
		}
		for _, e := range entries {
			switch filepath.Ext(e.Name()) {
			case ".conf", ".conflist", ".json":
				return true
			}
		}
		return false
	}
}

// cniAdd is the CNI's ADD for a pod on the machine.
func cniAdd(m *machine) func(context.Context, *corev1.Pod) error {
	node := containerruntime.Node{OS: map[bool]string{true: "windows", false: "linux"}[m.windows()], Disk: m.disk("")}
	return func(context.Context, *corev1.Pod) error { return containerruntime.CNIAdd(node, cniConfDir(m)) }
}

// ccmImage says whether an image is Azure's cloud-controller-manager. The
// cloud controller asks it for every pod each time a node changes: the
// catalog is built once, not on every question.
func ccmImage(image string) bool {
	return catalog().HasEffect("linux", image, startneeds.EffectCloudController)
}

// catalog reads the component catalog only (no client): it is safe for
// concurrent use.
var catalog = sync.OnceValue(func() *startneeds.Checker { return &startneeds.Checker{Components: startneeds.Catalog()} })

// machineInstances finds VMs by provider ID among the machines the
// emulator runs: azure:// and the VM's or scale-set instance's ARM ID.
type machineInstances struct{ r *Runtime }

func (i machineInstances) Exists(_ context.Context, providerID string) (bool, error) {
	id, ok := strings.CutPrefix(providerID, "azure://")
	if !ok {
		return true, nil // not an Azure VM: not this cloud's to delete
	}
	i.r.mu.Lock()
	defer i.r.mu.Unlock()
	// A stopped or deallocated VM still exists: its Node stays.
	_, running := i.r.machines[key(id)]
	_, halted := i.r.halted[key(id)]
	return running || halted, nil
}

// nodeFiles reads files on the disks of a cluster's machines, by node
// name: what a pod with a hostPath mount reads on its node.
func (r *Runtime) nodeFiles(endpoint string) func(node, path string) ([]byte, error) {
	return func(node, path string) ([]byte, error) {
		r.mu.Lock()
		var found *machine
		for _, m := range r.machines {
			if m.endpoint == endpoint && m.nodeName == node {
				found = m
			}
		}
		r.mu.Unlock()
		if found == nil {
			return nil, fmt.Errorf("node %s is not a machine of this cluster that runs", node)
		}
		return readNodeFile(found)(path)
	}
}

// nodeIMDS is the Instance Metadata Service of the VM a node of the
// cluster at endpoint runs on.
func (r *Runtime) nodeIMDS(endpoint string) func(node string) string {
	return func(node string) string {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, m := range r.machines {
			if m.endpoint == endpoint && m.nodeName == node {
				return m.arm.IMDS
			}
		}
		return ""
	}
}

// privateIP is the VNet address of a machine's host address: a node's
// InternalIP in the local world.
func (r *Runtime) privateIP(internalIP string) (string, bool) {
	a, err := netip.ParseAddr(internalIP)
	if err != nil {
		return "", false
	}
	return r.opts.Network.Private(a)
}
