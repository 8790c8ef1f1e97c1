package doctor

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWindowsNodesPerBuild(t *testing.T) {
	c := newCluster(t)
	c.linuxNode("lin-1")
	expect(t, "Linux only", WindowsNodes(c.state()), 0, Info)
	c.windowsNode("win-a")
	c.windowsNode("win-b")
	c.node("win-c", "windows", "10.0.17763", "10.0.17763.6054", nil)
	fs := WindowsNodes(c.state())
	if len(fs) != 2 {
		t.Fatalf("%d findings, want one per build: %+v", len(fs), fs)
	}
	expect(t, "2019", fs[:1], 1, Info, "10.0.17763", "Windows Server 2019", "win-c")
	expect(t, "2022", fs[1:], 1, Info, "2 Windows node(s)", "10.0.20348", "Windows Server 2022", "win-a, win-b")
}

func TestPlatformMismatch(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "platform")
	c.windowsNode("win-2022")
	iis := c.pod(ns, "iis-1809", "win-2022", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"}}}, true)
	expect(t, "running pod", PlatformMismatch(c.state()), 0, Error)

	c.update(iis, func() {
		setReady(iis, false, &corev1.ContainerStateWaiting{Reason: "CreateContainerError",
			Message: "failed to create containerd container: hcs::CreateComputeSystem iis: The container operating system does not match the host operating system."})
	})
	expect(t, "build mismatch", PlatformMismatch(c.state()), 1, Error, "Pod/platform/iis-1809", "10.0.20348", "Windows Server 2022", "ltsc2022", "winkube up --windows-version 2019", "windowsServerVersion")

	// A Linux image on a Windows node, known only from the kubelet's event.
	lin := c.pod(ns, "nginx", "win-2022", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "docker.io/library/nginx:1.27"}}}, false)
	c.create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nginx.1"}, Type: corev1.EventTypeWarning, Reason: "Failed",
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: lin.Name},
		Message:        `Failed to pull image "docker.io/library/nginx:1.27": no match for platform in manifest: not found`}, nil)
	fs := PlatformMismatch(c.state())
	expect(t, "both", fs, 2, Error)
	expect(t, "platform", fs[1:2], 1, Error, "Pod/platform/nginx", "no match for platform", "kubernetes.io/os")

	// A pod winkube admission kept Pending, and said why.
	pending := c.pod(ns, "iis-pending", "", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"}}}, false)
	c.create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iis-pending.1"}, Type: corev1.EventTypeWarning, Reason: "NoWindowsNodeOfBuild",
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pending.Name},
		Message:        "image mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019 runs on Windows 10.0.17763 (Windows Server 2019) only"}, nil)
	fs = PlatformMismatch(c.state())
	expect(t, "pending", fs[2:], 1, Warning, "Pod/platform/iis-pending", "waits for a Windows build", "10.0.17763")
}

func TestUninitializedNodes(t *testing.T) {
	c := newCluster(t)
	n := c.windowsNode("win-1")
	expect(t, "initialized", UninitializedNodes(c.state()), 0, Error)
	c.update(n, func() {
		n.Spec.Taints = []corev1.Taint{{Key: uninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	})
	expect(t, "tainted", UninitializedNodes(c.state()), 1, Error, "win-1", "cloud-provider=azure")
}

func TestDockershim(t *testing.T) {
	c := newCluster(t)
	c.windowsNode("containerd")
	expect(t, "containerd", Dockershim(c.state()), 0, Error)
	c.node("docker-old", "windows", "10.0.17763", "10.0.17763.2000", func(n *corev1.Node) {
		n.Status.NodeInfo.ContainerRuntimeVersion, n.Status.NodeInfo.KubeletVersion = "docker://20.10.9", "v1.23.17"
	})
	expect(t, "dockershim on 1.23", Dockershim(c.state()), 1, Warning, "docker-old", "cannot be upgraded past v1.23")
	c.node("docker-new", "windows", "10.0.17763", "10.0.17763.2000", func(n *corev1.Node) {
		n.Status.NodeInfo.ContainerRuntimeVersion, n.Status.NodeInfo.KubeletVersion = "docker://20.10.9", "v1.24.0"
	})
	fs := Dockershim(c.state())
	if len(only(fs, "dockershim")) != 2 || fs[0].Severity == fs[1].Severity {
		t.Fatalf("want a warning and an error: %+v", fs)
	}
	for _, f := range fs {
		if f.Object == "Node/docker-new" {
			expect(t, "dockershim on 1.24", []Finding{f}, 1, Error, "removed in Kubernetes v1.24", "containerd")
		}
	}
}

func TestVersionSkew(t *testing.T) {
	c := newCluster(t)
	s := c.state()
	if s.Version.Minor < 30 {
		t.Fatalf("the API server reports %s: the test assumes a recent one", s.Version)
	}
	within := s.Version
	within.Minor -= 3
	c.node("kubelet-ok", "windows", "10.0.20348", "10.0.20348.1", func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = within.String() })
	c.node("kubelet-same", "linux", "", "6.8", func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = s.Version.String() })
	expect(t, "within policy", VersionSkew(c.state()), 0, Error)

	tooOld, tooNew := s.Version, s.Version
	tooOld.Minor -= 4
	tooNew.Minor++
	c.node("kubelet-old", "linux", "", "6.8", func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = tooOld.String() })
	c.node("kubelet-new", "linux", "", "6.8", func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = tooNew.String() })
	fs := VersionSkew(c.state())
	expect(t, "outside policy", fs, 2, Error)
	expect(t, "old", fs[1:], 1, Error, "kubelet-old", "4 minor versions behind", "allows 3")
	expect(t, "new", fs[:1], 1, Error, "kubelet-new", "newer than the API server")
}

func TestHostProcessFeatureGate(t *testing.T) {
	c := newCluster(t)
	c.windowsNode("win-1")
	apiserver := func(gates string) *corev1.Pod {
		args := []string{"kube-apiserver", "--secure-port=6443"}
		if gates != "" {
			args = append(args, "--feature-gates="+gates)
		}
		return c.pod("kube-system", "kube-apiserver-cp-0", "", map[string]string{"component": "kube-apiserver"},
			corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.22.1", Command: args}}}, true)
	}
	at := func(version string) *State {
		s := c.state()
		var err error
		if s.Version, err = parse(version); err != nil {
			t.Fatal(err)
		}
		return s
	}
	p := apiserver("WindowsHostProcessContainers=true,SomeOther=false")
	expect(t, "1.22 with the gate", HostProcessFeatureGate(at("v1.22.1")), 0, Error)
	expect(t, "1.36 needs none", HostProcessFeatureGate(at("v1.36.3")), 0, Error)
	c.delete(p)
	p = apiserver("")
	expect(t, "1.22 without the gate", HostProcessFeatureGate(at("v1.22.1")), 1, Error, "WindowsHostProcessContainers=true", "kubeletExtraArgs")
	expect(t, "1.24 defaults it on", HostProcessFeatureGate(at("v1.24.3")), 0, Error)
	c.delete(p)
	apiserver("WindowsHostProcessContainers=false")
	expect(t, "1.24 turned off", HostProcessFeatureGate(at("v1.24.3")), 1, Error, "turns WindowsHostProcessContainers off")
	expect(t, "1.21", HostProcessFeatureGate(at("v1.21.2")), 1, Error, "no HostProcess containers", "v1.22")
}

func TestFailedMachines(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "machines")
	ctx := context.Background()
	m := azureMachine(c, ns, "win-md-0-abcde", "Provisioned", "")
	fs, err := FailedMachines(ctx, env.Client, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "provisioned", fs, 0, Error)
	c.update(m, func() {
		m.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "VMProvisionFailed", LastTransitionTime: metav1.Now(),
			Message: "Azure: OperationNotAllowed: Operation could not be completed as it results in exceeding approved standardDSv3Family Cores quota"}}
	})
	fs, err = FailedMachines(ctx, env.Client, ns, "demo")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "failed", fs, 1, Error, "AzureMachine/machines/win-md-0-abcde", "OperationNotAllowed", "quota", "delete the Machine")
	if fs, _ = FailedMachines(ctx, env.Client, ns, "other"); len(fs) != 0 {
		t.Fatalf("another cluster's machine reported: %+v", fs)
	}

	// A machine that did not become a node: the cause, the log's end and
	// the fix for what the log says.
	b := azureMachine(c, ns, "win-md-0-fghij", "Provisioned", "")
	cause := "no node registered 25m0s after VM win-md-0-fghij was provisioned: error execution phase preflight: couldn't validate the identity of the API Server: could not find a JWS signature in the cluster-info ConfigMap for token ID \"abcdef\""
	c.update(b, func() {
		b.Status.Conditions = []metav1.Condition{
			{Type: "Ready", Status: metav1.ConditionFalse, Reason: "BootstrapFailed", LastTransitionTime: metav1.Now(), Message: cause},
			{Type: "BootstrapSucceeded", Status: metav1.ConditionFalse, Reason: "BootstrapFailed", LastTransitionTime: metav1.Now(),
				Message: cause + "\nThe last lines of C:\\...\\cloudbase-init.log, read through Run Command:\n[preflight] Running pre-flight checks"}}
	})
	fs, err = FailedMachines(ctx, env.Client, ns, "demo")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "bootstrap failed", fs, 2, Error)
	expect(t, "bootstrap failed", fs[1:], 1, Error, "win-md-0-fghij did not become a node", "JWS signature", "read through Run Command", "[preflight]")
	if !strings.Contains(fs[1].Fix, "token expired") {
		t.Errorf("the fix for an expired token: %q", fs[1].Fix)
	}
}
