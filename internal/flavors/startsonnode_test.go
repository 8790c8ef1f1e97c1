package flavors_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/flavors"
)

// A node for the process model: its disk, its HNS, and a network where
// the API server's load-balanced address answers and the kubernetes
// Service's ClusterIP answers only once kube-proxy runs on the node.
type testNode struct {
	containerruntime.Node
	hns       map[string]string
	kubeProxy bool
}

func (n *testNode) Network(name string) (string, bool) { t, ok := n.hns[name]; return t, ok }
func (n *testNode) CreateNetwork(name, typ string)     { n.hns[name] = typ }

const (
	apiServerLB = "10.0.0.100:6443"
	clusterIP   = "10.0.0.1:443" // envtest's kubernetes Service
)

func newTestNode(t *testing.T, os, build, containerd string) *testNode {
	n := &testNode{hns: map[string]string{}}
	n.Node = containerruntime.Node{Name: "win-node", OS: os, Build: build, Containerd: containerd,
		Disk: vmdisk.Disk{Root: t.TempDir(), Windows: os == "windows"}, HNS: n}
	if os != "windows" {
		n.Node.HNS = nil
	}
	n.Dial = func(_ context.Context, addr string) (net.Conn, error) {
		if addr == apiServerLB || (addr == clusterIP && n.kubeProxy) {
			a, b := net.Pipe()
			_ = b.Close()
			return a, nil
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}
	}
	return n
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// cniConfigured is what containerd sees in the node's CNI directory.
func (n *testNode) cniConfigured(t *testing.T) bool {
	dir := "/etc/cni/net.d"
	if n.OS == "windows" {
		dir = `C:\etc\cni\net.d`
	}
	hp, err := n.Disk.HostPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(hp)
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); ext == ".conflist" || ext == ".conf" {
			return true
		}
	}
	return false
}

// addonSetup applies, in a namespace of its own, the ConfigMaps the
// Windows add-ons read (and what kubeadm and the provider write), and
// returns the flavor's DaemonSets.
func addonSetup(t *testing.T, flavor string) (kubernetes.Interface, string, map[string]*appsv1.DaemonSet) {
	t.Helper()
	ctx := context.Background()
	c := kubernetes.NewForConfigOrDie(env.Config)
	ns := "startsonnode-" + strings.ReplaceAll(flavor, "-", "")
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	objs, err := flavors.Generate(flavor, opts("v1.36.3", infrav1.WindowsServer2022))
	if err != nil {
		t.Fatal(err)
	}
	cms := []*corev1.ConfigMap{
		// kubeadm's kube-proxy ConfigMap, as `kubeadm init phase addon
		// kube-proxy` writes its kubeconfig.
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy"}, Data: map[string]string{"config.conf": "kind: KubeProxyConfiguration\n", "kubeconfig.conf": "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n    server: https://" + apiServerLB + "\n  name: default\nusers:\n- name: default\n  user:\n    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"}},
		// What the provider publishes.
		{ObjectMeta: metav1.ObjectMeta{Name: infrav1.ServicesEndpointConfigMap}, Data: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.100", "KUBERNETES_SERVICE_PORT": "6443"}},
	}
	dss := map[string]*appsv1.DaemonSet{}
	for _, o := range objs {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		for _, data := range cm.Data {
			dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(data), 4096)
			for {
				var u map[string]any
				if err := dec.Decode(&u); err != nil {
					break
				}
				switch u["kind"] {
				case "ConfigMap":
					var in corev1.ConfigMap
					decodeInto(t, u, &in)
					cms = append(cms, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: in.Name}, Data: in.Data})
				case "DaemonSet":
					var ds appsv1.DaemonSet
					decodeInto(t, u, &ds)
					dss[ds.Name] = &ds
				}
			}
		}
	}
	for _, sa := range []string{"kube-proxy", "calico-node", "cloud-node-manager", "default"} {
		if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, cm := range cms {
		cm.Namespace = ns
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return c, ns, dss
}

func decodeInto(t *testing.T, u map[string]any, into any) {
	t.Helper()
	data, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		t.Fatal(err)
	}
}

// startIn starts one container of a DaemonSet's pod on node with the
// image's process as the local world publishes it.
func startIn(t *testing.T, c kubernetes.Interface, ns string, node *testNode, ds *appsv1.DaemonSet, container string, change func(*corev1.Pod, *corev1.Container)) containerruntime.Outcome {
	t.Helper()
	return look(t, c, ns, node, ds, container, change, nil)
}

func look(t *testing.T, c kubernetes.Interface, ns string, node *testNode, ds *appsv1.DaemonSet, container string, change func(*corev1.Pod, *corev1.Container), memory any) containerruntime.Outcome {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-x", Namespace: ns, UID: types.UID("uid-" + ds.Name)}, Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.Spec.NodeName = node.Name
	spec := containerNamed(pod, container)
	if spec == nil {
		t.Fatalf("%s has no container %s", ds.Name, container)
	}
	if change != nil {
		change(pod, spec)
	}
	// The pod as the API server admits it: the service account's token
	// is a projected volume mounted into every container.
	admitted, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("the API server refuses the pod: %v", err)
	}
	admitted.Spec.NodeName, admitted.UID = node.Name, pod.UID
	pod = admitted
	spec = containerNamed(pod, container)
	img := imageProcess(t, spec.Image, node.OS)
	envv, err := containerruntime.Environment(ctx, c, pod, *spec)
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := containerruntime.Mounts(ctx, c, node.Disk, pod, *spec)
	if err != nil {
		t.Fatal(err)
	}
	return containerruntime.Start(ctx, node.Node, img, containerruntime.Container{ID: containerruntime.ContainerID(pod, spec.Name), Pod: pod, Spec: *spec, Env: envv, Mounts: mounts, Memory: memory})
}

func containerNamed(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

func imageProcess(t *testing.T, ref, os string) containerruntime.Image {
	t.Helper()
	for _, img := range registry.Catalog("v1.36.3", nil) {
		if registry.Canonical(img.Ref) == registry.Canonical(ref) {
			pr, ok := img.Process[os]
			if !ok {
				t.Fatalf("the local world's %s has no %s process", ref, os)
			}
			return containerruntime.Image{Entrypoint: pr.Entrypoint, Cmd: pr.Cmd, WorkingDir: pr.WorkingDir, Env: pr.Env, Files: pr.Files}
		}
	}
	t.Fatalf("the local world does not publish %s", ref)
	return containerruntime.Image{}
}

const (
	build2019 = "10.0.17763.6532"
	build2022 = "10.0.20348.2849"
)

func expect(t *testing.T, what string, got containerruntime.Outcome, state containerruntime.State, msg string) {
	t.Helper()
	if got.State != state || !strings.Contains(got.Message, msg) {
		t.Errorf("%s: state %d %q, want state %d with %q", what, got.State, got.Message, state, msg)
	}
}

// TestWindowsAddonsStartAsOnANode starts the Windows add-ons' processes
// the way containerd and hcsshim start them, and each of the forms the
// add-ons had before they were re-derived from upstream: each old form
// fails as a real Windows node fails it.
func TestWindowsAddonsStartAsOnANode(t *testing.T) {
	c, ns, dss := addonSetup(t, flavors.Windows)

	t.Run("kube-proxy", func(t *testing.T) {
		ds := dss["kube-proxy-windows"]
		// The old form: the script as the command, no working directory.
		old := func(_ *corev1.Pod, ct *corev1.Container) {
			ct.Command, ct.Args, ct.WorkingDir = []string{"%CONTAINER_SANDBOX_MOUNT_POINT%/kube-proxy/start.ps1"}, nil, ""
		}
		// Windows Server 2019: no bind filter, CreateProcess of a .ps1.
		expect(t, "script as command on 2019", startIn(t, c, ns, newTestNode(t, "windows", build2019, "1.7.24"), ds, "kube-proxy", old),
			containerruntime.StartFails, "%1 is not a valid Win32 application.")
		// Windows Server 2022: cmd /c hands the .ps1 to its file
		// association; the script never runs.
		expect(t, "script as command on 2022", startIn(t, c, ns, newTestNode(t, "windows", build2022, "1.7.24"), ds, "kube-proxy", old),
			containerruntime.Waits, "the script never ran")
		// The script as PowerShell's argument but from C:\: .\hns.psm1 is
		// not there.
		expect(t, "no working directory", startIn(t, c, ns, newTestNode(t, "windows", build2022, "1.7.24"), ds, "kube-proxy",
			func(_ *corev1.Pod, ct *corev1.Container) { ct.WorkingDir = "" }), containerruntime.Exits, `The specified module '.\hns.psm1' was not loaded`)
		// The re-derived form waits for Calico's network, then runs.
		node := newTestNode(t, "windows", build2022, "1.7.24")
		expect(t, "before Calico", startIn(t, c, ns, node, ds, "kube-proxy", nil), containerruntime.Waits, "Waiting for HNS network Calico to be created")
		node.CreateNetwork("Calico", "Overlay")
		expect(t, "with Calico's network", startIn(t, c, ns, node, ds, "kube-proxy", nil), containerruntime.Runs, "")
		// containerd 1.6 on 2019 (sandbox C:\C\<id>) runs it too.
		node = newTestNode(t, "windows", build2019, "1.6.36")
		node.CreateNetwork("Calico", "Overlay")
		expect(t, "containerd 1.6", startIn(t, c, ns, node, ds, "kube-proxy", nil), containerruntime.Runs, "")
	})

	t.Run("calico", func(t *testing.T) {
		ds := dss["calico-node-windows"]
		node := newTestNode(t, "windows", build2022, "1.7.24")
		// install-cni without the host's CNI directories mounted and
		// without SLEEP=false: the configuration stays in the container
		// and the process then exits watching a certificate that is not
		// there.
		got := startIn(t, c, ns, node, ds, "install-cni", func(p *corev1.Pod, ct *corev1.Container) {
			ct.VolumeMounts = nil
			var kept []corev1.EnvVar
			for _, e := range ct.Env {
				if e.Name != "SLEEP" {
					kept = append(kept, e)
				}
			}
			ct.Env = kept
		})
		expect(t, "install-cni, old form", got, containerruntime.Exits, "etcd-cert: The system cannot find the file specified.")
		if node.cniConfigured(t) {
			t.Fatal("install-cni without host mounts configured the node's CNI")
		}
		// Without the API server's address, install-cni asks the
		// kubernetes Service's ClusterIP, which nothing routes on a
		// Windows host before kube-proxy, which waits for Calico: both
		// wait in their connect, which Windows gives up after 21 s.
		expect(t, "install-cni via the ClusterIP", startIn(t, c, ns, node, ds, "install-cni", dropEnvs("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")),
			containerruntime.Waits, "dial tcp 10.0.0.1:443: connecting: 1 SYN(s) sent")
		expect(t, "node via the ClusterIP", startIn(t, c, ns, node, ds, "node", dropEnvs("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")),
			containerruntime.Waits, "dial tcp 10.0.0.1:443: connecting: 1 SYN(s) sent")
		if _, ok := node.Network("Calico"); ok {
			t.Fatal("Calico's network exists without the API server")
		}
		// The old scripts' paths, as the command.
		expect(t, "node-service.ps1 where v3.30 has none", startIn(t, c, ns, node, ds, "node", func(_ *corev1.Pod, ct *corev1.Container) {
			ct.Command, ct.Args = []string{"%CONTAINER_SANDBOX_MOUNT_POINT%/CalicoWindows/node/node-service.ps1"}, nil
		}), containerruntime.Exits, "is not recognized as an internal or external command")
		// No working directory: .\config.ps1 is not found.
		expect(t, "node without working directory", startIn(t, c, ns, node, ds, "node", func(_ *corev1.Pod, ct *corev1.Container) { ct.WorkingDir = "" }),
			containerruntime.Exits, `.\config.ps1`)

		// The re-derived DaemonSet: the init containers complete, the
		// node's CNI is configured, the node service creates Calico's
		// network and Felix runs.
		for _, name := range []string{"uninstall-calico", "install-cni"} {
			expect(t, name, startIn(t, c, ns, node, ds, name, nil), containerruntime.Runs, "")
		}
		if !node.cniConfigured(t) {
			t.Fatal("install-cni did not configure the node's CNI")
		}
		// A pod's CNI ADD: the HostProcess node service writes its
		// name in its sandbox, not at the nodename_file, which the
		// configuration marks optional as the operator's does.
		if err := containerruntime.CNIAdd(node.Node, `C:\etc\cni\net.d`); err != nil {
			t.Fatalf("a pod's CNI ADD: %v", err)
		}
		expect(t, "felix before the node service", startIn(t, c, ns, node, ds, "felix", nil), containerruntime.Waits, "Waiting for Calico initialisation")
		expect(t, "node", startIn(t, c, ns, node, ds, "node", nil), containerruntime.Runs, "")
		if typ, ok := node.Network("Calico"); !ok || typ != "Overlay" {
			t.Fatalf("Calico's HNS network: %q %v", typ, ok)
		}
		felix := startIn(t, c, ns, node, ds, "felix", nil)
		expect(t, "felix", felix, containerruntime.Runs, "")
		// Felix found the wireserver rule beside calico-node.exe, where
		// its Windows data plane reads static-rules.json; on 2019 with
		// containerd 1.6 (sandbox C:\C\<id>) too.
		const wireserver = "static rule wireserver: Block 168.63.129.16/32 port 80"
		if !strings.Contains(strings.Join(felix.Log, "\n"), wireserver) {
			t.Errorf("felix read no wireserver rule: %q", felix.Log)
		}
		old := newTestNode(t, "windows", build2019, "1.6.36")
		old.CreateNetwork("Calico", "Overlay")
		if felix := startIn(t, c, ns, old, ds, "felix", nil); felix.State != containerruntime.Runs || !strings.Contains(strings.Join(felix.Log, "\n"), wireserver) {
			t.Errorf("felix on containerd 1.6: state %d %q, log %q", felix.State, felix.Message, felix.Log)
		}
		// The ConfigMap not mounted: Felix starts without the rule.
		felix = startIn(t, c, ns, node, ds, "felix", func(_ *corev1.Pod, ct *corev1.Container) {
			ct.Args = []string{"$env:CONTAINER_SANDBOX_MOUNT_POINT/CalicoWindows/felix-service.ps1"}
		})
		if strings.Contains(strings.Join(felix.Log, "\n"), wireserver) {
			t.Errorf("felix-service.ps1 alone found a wireserver rule: %q", felix.Log)
		}
	})

	t.Run("cni-config-windows without nodename_file_optional", func(t *testing.T) {
		// What the flavors rendered before the operator's form: every
		// pod's CNI ADD stats c:/var/run/calico/nodename, which nothing
		// on a Windows node writes.
		ctx := context.Background()
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cni-config-windows", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		old := cm.DeepCopy()
		old.Name, old.ResourceVersion = "cni-config-windows-old", ""
		old.Data["config"] = strings.Replace(old.Data["config"], `"nodename_file_optional": true,`, "", 1)
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, old, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		node := newTestNode(t, "windows", build2022, "1.7.24")
		expect(t, "install-cni", startIn(t, c, ns, node, dss["calico-node-windows"], "install-cni", func(_ *corev1.Pod, ct *corev1.Container) {
			for i, e := range ct.Env {
				if e.Name == "CNI_NETWORK_CONFIG" {
					ct.Env[i].ValueFrom.ConfigMapKeyRef.Name = old.Name
				}
			}
		}), containerruntime.Runs, "")
		err = containerruntime.CNIAdd(node.Node, `C:\etc\cni\net.d`)
		if err == nil || !strings.Contains(err.Error(), "stat c:/var/run/calico/nodename: The system cannot find the file specified.") {
			t.Fatalf("a pod's CNI ADD without nodename_file_optional: %v", err)
		}
	})

	t.Run("cloud-node-manager", func(t *testing.T) {
		ds := dss["cloud-node-manager-windows"]
		// The old form: the program with kube-proxy's kubeconfig, whose
		// token path is C:\var\run\secrets\..., bound only by the bind
		// filter (containerd 1.7 on Windows Server 2022 and later).
		old := func(p *corev1.Pod, ct *corev1.Container) {
			ct.Command = []string{"%CONTAINER_SANDBOX_MOUNT_POINT%/cloud-node-manager.exe"}
			ct.Args = []string{"--node-name=$(NODE_NAME)", "--kubeconfig=%CONTAINER_SANDBOX_MOUNT_POINT%/var/lib/cpaw/kubeconfig.conf", "--v=2"}
		}
		expect(t, "old form on 2019", startIn(t, c, ns, newTestNode(t, "windows", build2019, "1.7.24"), ds, "cloud-node-manager", old),
			containerruntime.Exits, `/var/run/secrets/kubernetes.io/serviceaccount/token: The system cannot find the path specified.`)
		expect(t, "old form on 2022", startIn(t, c, ns, newTestNode(t, "windows", build2022, "1.7.24"), ds, "cloud-node-manager", old), containerruntime.Runs, "")
		for _, b := range []string{build2019, build2022} {
			expect(t, "chart form on "+b, startIn(t, c, ns, newTestNode(t, "windows", b, "1.7.24"), ds, "cloud-node-manager", nil), containerruntime.Runs, "")
		}
	})

	t.Run("csi-proxy", func(t *testing.T) {
		expect(t, "csi-proxy", startIn(t, c, ns, newTestNode(t, "windows", build2019, "1.7.24"), dss["csi-proxy"], "csi-proxy", nil), containerruntime.Runs, "")
	})
}

// TestLinuxCNIInstallWritesTheHost: install-cni's configuration reaches
// the node only through its hostPath mount.
func TestLinuxCNIInstallWritesTheHost(t *testing.T) {
	c, ns, dss := addonSetup(t, flavors.Windows)
	node := newTestNode(t, "linux", "", "1.7.24")
	node.kubeProxy = true
	expect(t, "without the mount", startIn(t, c, ns, node, dss["calico-node"], "install-cni", func(p *corev1.Pod, ct *corev1.Container) {
		ct.VolumeMounts = nil
	}), containerruntime.Runs, "")
	if node.cniConfigured(t) {
		t.Fatal("configured without the host mount")
	}
	// Without kube-proxy on the node the ClusterIP does not answer: the
	// process waits in its connect, and on Linux the connection keeps its
	// first SYN's fate after kube-proxy came. The provider's
	// kubernetes-services-endpoint ConfigMap spares it that, as Calico's
	// manifest has it: install-cni reaches the API server's load balancer.
	node.kubeProxy = false
	noEndpoint := func(_ *corev1.Pod, ct *corev1.Container) { ct.EnvFrom = nil }
	before := startIn(t, c, ns, node, dss["calico-node"], "install-cni", noEndpoint)
	expect(t, "before kube-proxy, through the ClusterIP", before, containerruntime.Waits, "dial tcp 10.0.0.1:443: connecting: 1 SYN(s) sent, none answered yet")
	if before.Memory == nil || node.cniConfigured(t) {
		t.Fatalf("install-cni waiting in its connect holds %v, configured the node: %v", before.Memory, node.cniConfigured(t))
	}
	node.kubeProxy = true
	expect(t, "its connect after kube-proxy came", look(t, c, ns, node, dss["calico-node"], "install-cni", noEndpoint, before.Memory), containerruntime.Waits, "SYN(s) sent")
	node.kubeProxy = false
	expect(t, "before kube-proxy, with the services endpoint", startIn(t, c, ns, node, dss["calico-node"], "install-cni", nil), containerruntime.Runs, "")
	if !node.cniConfigured(t) {
		t.Fatal("install-cni did not configure the node through the API server's load balancer")
	}
	node.kubeProxy = true
	expect(t, "with kube-proxy", startIn(t, c, ns, node, dss["calico-node"], "install-cni", nil), containerruntime.Runs, "")
	if !node.cniConfigured(t) {
		t.Fatal("install-cni did not configure the node")
	}
	// Pods get no network until calico-node has written the node's name.
	if err := containerruntime.CNIAdd(node.Node, "/etc/cni/net.d"); err == nil || !strings.Contains(err.Error(), "stat /var/lib/calico/nodename: no such file or directory") {
		t.Fatalf("CNI ADD before calico-node: %v", err)
	}
	expect(t, "calico-node", startIn(t, c, ns, node, dss["calico-node"], "calico-node", nil), containerruntime.Runs, "")
	if err := containerruntime.CNIAdd(node.Node, "/etc/cni/net.d"); err != nil {
		t.Fatalf("CNI ADD after calico-node: %v", err)
	}
	// A command that is not in the image: runc's error.
	expect(t, "no such program", startIn(t, c, ns, node, dss["calico-node"], "install-cni", func(_ *corev1.Pod, ct *corev1.Container) {
		ct.Command = []string{"install-calico"}
	}), containerruntime.StartFails, `exec: "install-calico": executable file not found in $PATH`)
}

func dropEnvs(names ...string) func(*corev1.Pod, *corev1.Container) {
	return func(_ *corev1.Pod, ct *corev1.Container) {
		var kept []corev1.EnvVar
		for _, e := range ct.Env {
			drop := false
			for _, n := range names {
				drop = drop || e.Name == n
			}
			if !drop {
				kept = append(kept, e)
			}
		}
		ct.Env = kept
	}
}
