package machines_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/azure/vmimages"
	"github.com/winkube/winkube/internal/azurejson"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/naming"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// mixed is the cluster the test builds: Cluster API objects in the
// management cluster, machines in the emulator, nodes in the workload
// cluster the control-plane machine runs.
type mixed struct {
	cluster  *clusterv1.Cluster
	objs     []client.Object
	azure    *azure
	workload kubernetes.Interface
	wc       client.Client
}

func (m *mixed) template(name string) bootstrapv1.KubeadmConfigSpec {
	for _, o := range m.objs {
		if t, ok := o.(*bootstrapv1.KubeadmConfigTemplate); ok && t.Name == name {
			return t.Spec.Template.Spec
		}
	}
	panic("no KubeadmConfigTemplate " + name)
}

func (m *mixed) hasAddons(name string) bool {
	for _, o := range m.objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == m.cluster.Name+"-"+name {
			return true
		}
	}
	return false
}

func (m *mixed) addons(name string) string {
	for _, o := range m.objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == m.cluster.Name+"-"+name {
			for _, v := range cm.Data {
				return v
			}
		}
	}
	panic("no add-on ConfigMap " + name)
}

func resolveImage(t *testing.T, req images.Request) virtualmachines.Image {
	t.Helper()
	req.KubernetesVersion, req.Location = k8sVersion, "westeurope"
	lister, err := vmimages.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.NewResolver(lister, time.Hour).Resolve(context.Background(), nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if g := img.ComputeGallery; g != nil {
		return virtualmachines.Image{CommunityGalleryImageID: "/CommunityGalleries/" + g.Gallery + "/Images/" + g.Name + "/Versions/" + g.Version}
	}
	mp := img.Marketplace
	return virtualmachines.Image{Publisher: mp.Publisher, Offer: mp.Offer, SKU: mp.SKU, Version: mp.Version}
}

func nodeReady(n *corev1.Node) (bool, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, c.Message
		}
	}
	return false, "no Ready condition"
}

// newMixedCluster makes the Cluster API objects of a Windows-flavor
// cluster called name and boots its control-plane machine, up to the
// node registered and marked; start is when its VM was created.
func newMixedCluster(t *testing.T, ctx context.Context, name string) (m *mixed, endpoint, cpNode string, start time.Time) {
	t.Helper()
	testenv.SkipIfShort(t, "a workload cluster's control plane booted in the machine runtime")
	m = &mixed{azure: newAzure(t, ctx, name+"-rg")}
	t.Cleanup(func() { m.dump(t) })
	cpNode = name + "-control-plane-abcde"
	// The endpoint is the API server load balancer's: the control plane is
	// reached through its rule and probe, as on Azure.
	endpoint = m.azure.apiServerLB(t, ctx, name)

	objs, err := flavors.Generate(flavors.Windows, flavors.Options{
		ClusterName: name, KubernetesVersion: k8sVersion, WindowsVersion: infrav1.WindowsServer2022, LinuxNodes: 1, WindowsNodes: 1,
		Location: "westeurope", SubscriptionID: subscriptID,
		SSHPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh test",
	})
	if err != nil {
		t.Fatal(err)
	}
	m.objs = objs
	kcp := controlPlaneSpec(objs)

	m.cluster = &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: endpoint, Port: 6443},
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
				Services: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.96.0.0/12"}},
			},
		},
	}
	if err := env.Client.Create(ctx, m.cluster); err != nil {
		t.Fatal(err)
	}
	m.cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if err := env.Client.Status().Update(ctx, m.cluster); err != nil {
		t.Fatal(err)
	}

	// The cloud provider config each machine template's Secret carries,
	// as winkube's controller writes it.
	cfg := azurejson.New(azurejson.Network{SubscriptionID: subscriptID, ResourceGroup: name + "-rg", Location: "westeurope",
		VnetName: name + "-rg-vnet", VnetResourceGroup: name + "-rg", SubnetName: "node", SecurityGroupName: name + "-rg-nsg", RouteTableName: name + "-node-routetable"},
		azurejson.Credentials{TenantID: "6f7a1e2b-5c3d-4e8f-9a0b-1c2d3e4f5a6b"})
	for _, owner := range []string{name + "-control-plane", name + "-md-0", name + "-md-win"} {
		sec, err := azurejson.Secret(owner, "default", name, metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: name, UID: m.cluster.UID}, cfg, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}

	// The control plane.
	cpData := bootstrapData(t, ctx, m.cluster, cpNode, true, kcp)
	start = time.Now()
	m.azure.vm(t, ctx, virtualmachines.Spec{Name: cpNode, ComputerName: cpNode, CustomData: cpData,
		Image: resolveImage(t, images.Request{OS: infrav1.Linux})}, m.azure.cpSubnet)
	if err := kubeconfig.CreateSecret(ctx, env.Client, m.cluster); err != nil {
		t.Fatal(err)
	}
	wcfg := workloadConfig(t, ctx, m.cluster)
	if m.workload, err = kubernetes.NewForConfig(wcfg); err != nil {
		t.Fatal(err)
	}
	if m.wc, err = client.New(wcfg, client.Options{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 3*time.Minute, func() string {
		n, err := m.workload.CoreV1().Nodes().Get(ctx, cpNode, metav1.GetOptions{})
		if err != nil {
			return "control-plane node: " + err.Error()
		}
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; !ok {
			return "control-plane node not yet marked"
		}
		return ""
	})
	return m, endpoint, cpNode, start
}

// controlPlaneInitialized records what Cluster API's cluster controller
// does once the first control-plane node exists: workers may now get
// join data.
func (m *mixed) controlPlaneInitialized(t *testing.T, ctx context.Context) {
	t.Helper()
	conditions.Set(m.cluster, metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue, Reason: clusterv1.ClusterControlPlaneInitializedReason})
	m.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	if err := env.Client.Status().Update(ctx, m.cluster); err != nil {
		t.Fatal(err)
	}
}

// TestMixedClusterBoots is issue 8's acceptance: Cluster API's kubeadm
// bootstrap controller writes the custom data, the emulator provisions a
// control-plane VM, a Linux and a Windows Server 2022 worker, and the
// machine runtime turns them into a working cluster.
func TestMixedClusterBoots(t *testing.T) {
	ctx := context.Background()
	startBootstrapProvider(t)
	m, endpoint, cpNode, start := newMixedCluster(t, ctx, "mixed")
	t.Logf("control-plane VM: node registered %s after its VM was created", time.Since(start).Round(time.Millisecond))
	// Without a CNI the node is NotReady, for the reason a kubelet gives.
	n, err := m.workload.CoreV1().Nodes().Get(ctx, cpNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ready, msg := nodeReady(n); ready || !strings.Contains(msg, "cni plugin not initialized") {
		t.Fatalf("a node without a CNI is Ready=%v (%s), want NotReady for the network plugin", ready, msg)
	}
	// Calico's CRDs come in ConfigMaps of their own, ahead of the rest.
	for i := 0; m.hasAddons(fmt.Sprintf("calico-crds-%d", i)); i++ {
		applyYAML(t, ctx, m.wc, m.addons(fmt.Sprintf("calico-crds-%d", i)))
	}
	applyYAML(t, ctx, m.wc, m.addons("calico-linux"))
	applyYAML(t, ctx, m.wc, m.addons("calico-resources"))
	// cloud-provider-azure: the node manager initializes each node, the
	// controller manager runs on the control plane from its azure.json.
	applyYAML(t, ctx, m.wc, m.addons("cloud-provider-azure"))
	poll.Until(t, 2*time.Minute, func() string {
		n, err := m.workload.CoreV1().Nodes().Get(ctx, cpNode, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if ok, msg := nodeReady(n); !ok {
			return "control plane not Ready: " + msg
		}
		return ""
	})
	t.Logf("control-plane VM: node Ready %s after its VM was created", time.Since(start).Round(time.Millisecond))
	logMemory(t)

	// What Cluster API's cluster controller records once the first
	// control-plane node exists: workers may now get join data.
	m.controlPlaneInitialized(t, ctx)
	// What the provider publishes once the API server has its address:
	// Calico for Windows reaches it there, not through the Service's
	// ClusterIP (which needs kube-proxy, which needs Calico's network).
	ep := m.cluster.Spec.ControlPlaneEndpoint
	applyYAML(t, ctx, m.wc, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: kube-system\ndata:\n  KUBERNETES_SERVICE_HOST: %q\n  KUBERNETES_SERVICE_PORT: \"%d\"\n",
		infrav1.ServicesEndpointConfigMap, ep.Host, ep.Port))
	for _, a := range []string{"calico-windows", "kube-proxy-windows", "csi-proxy"} {
		applyYAML(t, ctx, m.wc, m.addons(a))
	}
	linuxName, winName := "mixed-md-0-x7k2p", "mixed-md-win-q8t4z"
	winComputer := naming.WindowsMachineName(winName)
	linuxData := bootstrapData(t, ctx, m.cluster, linuxName, false, m.template("mixed-md-0"))
	winData := bootstrapData(t, ctx, m.cluster, winName, false, m.template("mixed-md-win"))
	start = time.Now()
	m.azure.vm(t, ctx, virtualmachines.Spec{Name: linuxName, ComputerName: linuxName, CustomData: linuxData, Image: resolveImage(t, images.Request{OS: infrav1.Linux})}, m.azure.nodeSubnet)
	m.azure.vm(t, ctx, virtualmachines.Spec{Name: winName, ComputerName: winComputer, Windows: true, CustomData: winData,
		Image: resolveImage(t, images.Request{OS: infrav1.Windows, WindowsVersion: infrav1.WindowsServer2022, Runtime: infrav1.Containerd})}, m.azure.nodeSubnet)
	readyAt := map[string]time.Duration{}
	poll.Until(t, 4*time.Minute, func() string {
		nodes, err := m.workload.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		var waiting []string
		for _, n := range nodes.Items {
			if ok, msg := nodeReady(&n); !ok {
				waiting = append(waiting, n.Name+": "+msg)
			} else if _, seen := readyAt[n.Name]; !seen {
				readyAt[n.Name] = time.Since(start)
			}
		}
		if len(nodes.Items) < 3 || len(waiting) > 0 {
			return fmt.Sprintf("%d nodes, not Ready: %v", len(nodes.Items), waiting)
		}
		return ""
	})
	t.Logf("workers Ready after their VMs were created: Linux %s, Windows %s", readyAt[linuxName].Round(time.Millisecond), readyAt[winComputer].Round(time.Millisecond))

	// Each node carries what a kubelet of its OS sets, and the cloud
	// node manager has initialized it.
	want := map[string]map[string]string{
		cpNode:      {"kubernetes.io/os": "linux", "node-role.kubernetes.io/control-plane": ""},
		linuxName:   {"kubernetes.io/os": "linux"},
		winComputer: {"kubernetes.io/os": "windows", "node.kubernetes.io/windows-build": "10.0.20348"},
	}
	// The node managers (DaemonSet pods) initialize each node once they run.
	poll.Until(t, 2*time.Minute, func() string {
		for name := range want {
			n, err := m.workload.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if n.Spec.ProviderID == "" {
				return "node " + name + " not initialized by a cloud node manager yet"
			}
		}
		return ""
	})
	for name, labels := range want {
		n, err := m.workload.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node %s: %v", name, err)
		}
		labels["kubernetes.io/arch"], labels["node.kubernetes.io/instance-type"], labels["topology.kubernetes.io/zone"] = "amd64", "Standard_D2s_v3", "0"
		for k, v := range labels {
			if got, ok := n.Labels[k]; !ok || got != v {
				t.Errorf("node %s label %s = %q, want %q", name, k, got, v)
			}
		}
		if !strings.HasPrefix(n.Spec.ProviderID, "azure:///subscriptions/"+subscriptID+"/resourceGroups/mixed-rg/providers/Microsoft.Compute/virtualMachines/") {
			t.Errorf("node %s providerID %q", name, n.Spec.ProviderID)
		}
		for _, tt := range n.Spec.Taints {
			if tt.Key == "node.cloudprovider.kubernetes.io/uninitialized" {
				t.Errorf("node %s still has the uninitialized taint", name)
			}
		}
		if n.Status.NodeInfo.KubeletVersion != k8sVersion || n.Status.Capacity.Cpu().Value() != 2 || n.Status.NodeInfo.ContainerRuntimeVersion == "" {
			t.Errorf("node %s: kubelet %s, %d CPUs, runtime %q", name, n.Status.NodeInfo.KubeletVersion, n.Status.Capacity.Cpu().Value(), n.Status.NodeInfo.ContainerRuntimeVersion)
		}
	}
	if n, _ := m.workload.CoreV1().Nodes().Get(ctx, winComputer, metav1.GetOptions{}); n != nil && !strings.HasPrefix(n.Status.NodeInfo.OSImage, "Windows Server 2022") {
		t.Errorf("Windows node OS image %q", n.Status.NodeInfo.OSImage)
	}
	// Cluster API's machine controller lifts this taint once the Machine
	// has its node; no machine controller runs here.
	for _, name := range []string{linuxName, winComputer} {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := m.workload.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var kept []corev1.Taint
			for _, tt := range n.Spec.Taints {
				if tt.Key != clusterv1.NodeUninitializedTaint.Key {
					kept = append(kept, tt)
				}
			}
			n.Spec.Taints = kept
			_, err = m.workload.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	m.workloads(t, ctx, winComputer, linuxName)
	m.apiServerEgress(t, ctx, linuxName)
	m.containerLifecycle(t, ctx, linuxName)
	m.loadBalancing(t, ctx, linuxName)
	m.etcdThroughPortForward(t, ctx, cpNode)
	m.joinRefusals(t, ctx, endpoint)
	m.killedScheduler(t, ctx, cpNode)
	m.brokenComponent(t, ctx, linuxName)
	m.powerCycle(t, ctx, linuxName, linuxName)
	m.privateSubnet(t, ctx)
	m.stop(t, ctx, cpNode, winName)
}

// brokenComponent: a cloud node manager whose ServiceAccount may do nothing
// starts, exits as the real one does, and is restarted with a back-off.
func (m *mixed) brokenComponent(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cnm-without-rbac", Namespace: "kube-system"},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "cloud-node-manager", Image: "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager:v1.36.0",
				Env: []corev1.EnvVar{{Name: "NODE_NAME", Value: node}}}}},
	}
	if _, err := m.workload.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		p, err := m.workload.CoreV1().Pods("kube-system").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, cs := range p.Status.ContainerStatuses {
			w := cs.State.Waiting
			last := cs.LastTerminationState.Terminated
			if w != nil && w.Reason == "CrashLoopBackOff" && cs.RestartCount >= 2 &&
				last != nil && last.ExitCode != 0 && strings.Contains(last.Message, `cannot get resource "nodes"`) {
				return ""
			}
		}
		return fmt.Sprintf("container statuses %+v", p.Status.ContainerStatuses)
	})
	if err := m.workload.CoreV1().Pods("kube-system").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stop deletes machines: a worker's kubelet stops (its node goes stale),
// and a control plane's processes end; every machine's disk is removed.
func (m *mixed) stop(t *testing.T, ctx context.Context, cpNode, winVM string) {
	var pids map[string]int
	var dirs []string
	for _, n := range rt.Nodes() {
		if n.NodeName == cpNode {
			pids = n.Pids
		}
		dirs = append(dirs, n.Dir)
	}
	if len(pids) != 4 {
		t.Fatalf("control plane processes %v", pids)
	}
	m.azure.deleteVM(t, ctx, winVM)
	lease, err := m.workload.CoordinationV1().Leases("kube-node-lease").Get(ctx, naming.WindowsMachineName(winVM), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := lease.Spec.RenewTime.Time
	for _, vm := range []string{"mixed-md-0-x7k2p", "mixed-control-plane-abcde"} {
		m.azure.deleteVM(t, ctx, vm)
	}
	// The delete operation ends as the runtime stops the machine.
	poll.Until(t, 30*time.Second, func() string {
		for name, pid := range pids {
			if alive(pid) {
				return fmt.Sprintf("%s (pid %d) still runs after its VM was deleted", name, pid)
			}
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				return fmt.Sprintf("machine disk %s is left behind (%v)", d, err)
			}
		}
		if n := rt.Nodes(); len(n) != 0 {
			return fmt.Sprintf("machines still running: %+v", n)
		}
		return ""
	})
	_ = renewed
}

func controlPlaneSpec(objs []client.Object) bootstrapv1.KubeadmConfigSpec {
	for _, o := range objs {
		if kcp, ok := o.(*controlplanev1.KubeadmControlPlane); ok {
			return kcp.Spec.KubeadmConfigSpec
		}
	}
	panic("no KubeadmControlPlane")
}

// logMemory prints the resident memory of each control-plane process.
func logMemory(t *testing.T) {
	for _, n := range rt.Nodes() {
		total := 0
		var parts []string
		for name, pid := range n.Pids {
			kb := rssKB(pid)
			total += kb
			parts = append(parts, fmt.Sprintf("%s %d MiB", name, kb/1024))
		}
		if len(parts) > 0 {
			t.Logf("control plane %s: %d MiB resident (%s)", n.NodeName, total/1024, strings.Join(parts, ", "))
		}
	}
}

func rssKB(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) > 1 {
				v, _ := strconv.Atoi(f[1])
				return v
			}
		}
	}
	return 0
}

// dump prints the workload cluster's nodes and pods when a test failed,
// which is what one needs to see why.
func (m *mixed) dump(t *testing.T) {
	if !t.Failed() || m.workload == nil {
		return
	}
	ctx := context.Background()
	for _, l := range bootLog.all() {
		t.Log(l)
	}
	nodes, _ := m.workload.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	for _, n := range nodes.Items {
		ready, msg := nodeReady(&n)
		t.Logf("node %s ready=%v %s taints=%v podCIDR=%s", n.Name, ready, msg, n.Spec.Taints, n.Spec.PodCIDR)
	}
	pods, _ := m.workload.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		var st []string
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Waiting != nil:
				st = append(st, c.Name+": "+c.State.Waiting.Reason+" "+c.State.Waiting.Message)
			case c.State.Running != nil:
				st = append(st, c.Name+": running")
			}
		}
		t.Logf("pod %s/%s node=%s phase=%s %s %s %v", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message, st)
	}
	evs, _ := m.workload.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning {
			t.Logf("event %s %s: %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}
