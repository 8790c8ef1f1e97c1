package kubelet

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/internal/poll"
)

// servingNode is a kubelet on a real API server whose pod IPs are served
// at loopback addresses of the test's own block.
type servingNode struct {
	client kubernetes.Interface
	// ca is the kubelet's client CA (testenv's).
	ca *x509.CertPool
	// cfg reaches the API server as its administrator.
	cfg  *rest.Config
	node string
	addr netip.Addr
	mu   sync.Mutex
	pods map[string]netip.Addr
	// disk is the node's disk, where the kubelet keeps pods' volumes.
	disk vmdisk.Disk
}

func (n *servingNode) podAddress(ip string) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.pods[ip]
	if !ok {
		return netip.Addr{}, errors.New("no host address for " + ip)
	}
	return a, nil
}

func startServingNode(t *testing.T) *servingNode {
	t.Helper()
	env := apiServer.Env(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	n := &servingNode{client: client, ca: env.KubeletClientCA, cfg: env.Config, node: "node-a", addr: testAddress(t), pods: map[string]netip.Addr{}, disk: vmdisk.Disk{Root: t.TempDir()}}
	// The node's pod CIDR is 10.244.1.0/24: .2 is the first pod's
	// address, and the subtests make a dozen pods at most.
	for i := 2; i < 14; i++ {
		n.pods[netip.AddrFrom4([4]byte{10, 244, 1, byte(i)}).String()] = testAddress(t)
	}
	k, err := Start(context.Background(), Config{
		NodeName: n.node, Client: client, ClientCA: n.ca, Address: n.addr, Host: linux, Images: startRegistry(t),
		NodeInfo:   corev1.NodeSystemInfo{OSImage: "Ubuntu 24.04.1 LTS", KernelVersion: "6.8.0-1021-azure", OperatingSystem: "linux"},
		PodAddress: n.podAddress, Log: logr.Discard(), Disk: n.disk,
		// The node's CNI configuration is in place (what the CNI's
		// install step writes is the process model's, tested there).
		NetworkConfigured: func() bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	ctx := context.Background()
	// What the controller-manager's node IPAM does.
	if _, err := client.CoreV1().Nodes().Patch(ctx, n.node, types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A CNI pod makes the node's network ready.
	n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "calico-node", Namespace: "kube-system"},
		Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "calico-node", Image: "docker.io/calico/node:v3.30.7"}}}})
	return n
}

// run creates a pod on the node and waits for it to be Running and Ready.
func (n *servingNode) run(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	pod.Spec.NodeName = n.node
	if _, err := n.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	poll.Until(t, time.Minute, func() string {
		p, err := n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		got = p
		if p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return "pod " + p.Name + " is " + string(p.Status.Phase) + ", not yet Running and Ready"
		}
		return ""
	})
	return got
}

func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// TestSimulatedContainersServe runs one kubelet on a real API server
// (one control plane for the subtests: it is slow to start).
func TestSimulatedContainersServe(t *testing.T) {
	// Its subtests wait on probes, backoffs and pod starts; its Nodes
	// (node-a, out-a, win-a) and pods are its own names on the shared API
	// server, so it waits beside the package's other parallel tests.
	t.Parallel()
	n := startServingNode(t)
	t.Run("DeclaredPortAnswers", func(t *testing.T) { declaredPortAnswers(t, n) })
	t.Run("ImagePortsListenUndeclared", func(t *testing.T) { imagePortsListenUndeclared(t, n) })
	t.Run("ImagePullBacksOff", func(t *testing.T) { imagePullBacksOff(t, n) })
	t.Run("ExecLinux", func(t *testing.T) { execLinux(t, n) })
	t.Run("KubeletAPIRefusesOtherUsers", func(t *testing.T) { kubeletAPIRefusesOtherUsers(t, n) })
	t.Run("PortForwardToPod", func(t *testing.T) { portForwardToPod(t, n) })
	t.Run("ExecWindows", func(t *testing.T) { execWindows(t, n) })
	t.Run("AgnhostServes", func(t *testing.T) { agnhostServesItsSubcommand(t, n) })
	t.Run("LogsShowOutput", func(t *testing.T) { logsShowOutput(t, n) })
}

// logsShowOutput: what a completed process wrote (the runtime's model of
// `cmd /S /C echo %username%`, which the [sig-windows] SecurityContext
// specs read with kubectl logs) is in its container's log.
func logsShowOutput(t *testing.T, n *servingNode) {
	ctx := context.Background()
	const node = "out-a"
	addr := testAddress(t)
	k, err := Start(ctx, Config{
		NodeName: node, Client: n.client, ClientCA: n.ca, Address: addr, Host: linux, Images: startRegistry(t),
		NodeInfo:   corev1.NodeSystemInfo{OSImage: "Ubuntu 24.04.1 LTS", KernelVersion: "6.8.0-1021-azure", OperatingSystem: "linux"},
		PodAddress: func(string) (netip.Addr, error) { return testAddress(t), nil }, Log: logr.Discard(), Disk: vmdisk.Disk{Root: t.TempDir()},
		NetworkConfigured: func() bool { return true },
		StartCheck: func(context.Context, *corev1.Pod, *corev1.Container, *Pulled) error {
			return &Ended{Code: 0, Output: []string{"ContainerUser"}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	if _, err := n.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.244.3.0/24","podCIDRs":["10.244.3.0/24"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "echo-user", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, HostNetwork: true,
		Containers: []corev1.Container{{Name: "c", Image: "docker.io/library/busybox:1.36", Command: []string{"sh", "-c", "echo ContainerUser"}}}}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		p, err := n.client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Status.Phase != corev1.PodSucceeded {
			return "pod is " + string(p.Status.Phase) + ", not yet Succeeded"
		}
		return ""
	})
	b, err := n.client.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "c"}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(b), "\nContainerUser\n") {
		t.Fatalf("logs %q (%v), want the process's output ContainerUser", b, err)
	}
}

// agnhostServesItsSubcommand: the e2e's agnhost image running netexec
// answers its endpoints as agnhost does (/hostname the pod's host name,
// /echo the message, /clientip the caller's address) on --http-port, and
// running serve-hostname its host name on --port; the ports it does not
// serve refuse.
func agnhostServesItsSubcommand(t *testing.T, n *servingNode) {
	const image = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	get := func(addr, path string) string {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	pod := n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "netexec"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		// As the e2e's Windows node-shutdown test writes it.
		Name: "agnhost", Image: image, Command: []string{"/agnhost", "netexec", "--http-port=8090"},
	}}}})
	host, _ := n.podAddress(pod.Status.PodIP)
	addr := net.JoinHostPort(host.String(), "8090")
	if got := get(addr, "/hostname"); got != "netexec" {
		t.Errorf("/hostname answered %q, want the pod's host name", got)
	}
	if got := get(addr, "/echo?msg=hello"); got != "hello" {
		t.Errorf("/echo answered %q", got)
	}
	if got := get(addr, "/clientip"); !strings.HasPrefix(got, "127.") {
		t.Errorf("/clientip answered %q, want the caller's address", got)
	}
	if a := net.JoinHostPort(host.String(), "8080"); !refused(a) {
		t.Errorf("agnhost netexec on --http-port=8090 also listens on 8080")
	}
	// The image's own CMD is pause: only the args name serve-hostname.
	pod = n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "serve-hostname"}, Spec: corev1.PodSpec{Hostname: "backend-0", Containers: []corev1.Container{{
		Name: "agnhost", Image: image, Args: []string{"serve-hostname"},
	}}}})
	host, _ = n.podAddress(pod.Status.PodIP)
	if got := get(net.JoinHostPort(host.String(), "9376"), "/"); got != "backend-0" {
		t.Errorf("serve-hostname answered %q, want spec.hostname", got)
	}
}

// declaredPortAnswers: a Running pod's declared port answers HTTP with
// the simulation's page; an undeclared port refuses; the port closes when
// the pod is deleted; the readiness probe went through the same listener.
func declaredPortAnswers(t *testing.T, n *servingNode) {
	ctx := context.Background()
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("web")}}, PeriodSeconds: 1}
	pod := n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		// busybox serves nothing of its own: only the declared port listens.
		Name: "app", Image: "docker.io/library/busybox:1.36", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}},
		ReadinessProbe: probe,
	}}}})
	host, err := n.podAddress(pod.Status.PodIP)
	if err != nil {
		t.Fatalf("pod IP %q: %v", pod.Status.PodIP, err)
	}
	addr := net.JoinHostPort(host.String(), "8080")
	resp, err := http.Get("http://" + addr + "/any/path?x=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(SimulatedHeader) != "true" || resp.Header.Get("X-Winkube-Pod") != "default/web-1" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	for _, want := range []string{"simulation", "default/web-1", "node-a", "container: app", "docker.io/library/busybox:1.36", "Ubuntu 24.04.1 LTS (6.8.0-1021-azure)", "8080/TCP", "GET /any/path?x=1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if a := net.JoinHostPort(host.String(), "9090"); !refused(a) {
		t.Errorf("undeclared port %s does not refuse", a)
	}
	// The probe reached the server: its request is how the pod got Ready,
	// and a probe of the undeclared port is refused the same way.
	r := &podRun{pod: pod, podIP: pod.Status.PodIP, net: &podNet{addr: host}, mains: []*ctrRun{{spec: pod.Spec.Containers[0]}}}
	if ok, msg := r.probe(r.mains[0], probe, nil); !ok {
		t.Errorf("the readiness probe fails against the running pod: %s", msg)
	}
	bad := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(9090)}}}
	if ok, msg := r.probe(r.mains[0], bad, nil); ok || !strings.Contains(msg, pod.Status.PodIP+":9090: connect: connection refused") {
		t.Errorf("probe of an undeclared port: %v %q", ok, msg)
	}

	if err := n.client.CoreV1().Pods("default").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if !refused(addr) {
			return addr + " still accepts connections after the pod was deleted"
		}
		return ""
	})
}

// imagePortsListenUndeclared: nginx's image serves 80 without the pod
// declaring it, as a real nginx would; a pod whose readiness probe targets
// a port nothing serves never gets Ready.
func imagePortsListenUndeclared(t *testing.T, n *servingNode) {
	pod := n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nginx"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "nginx", Image: "docker.io/library/nginx:1.27",
	}}}})
	host, _ := n.podAddress(pod.Status.PodIP)
	resp, err := http.Get("http://" + net.JoinHostPort(host.String(), "80") + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(SimulatedHeader) != "true" {
		t.Errorf("nginx's port 80 answers without the simulation header: %v", resp.Header)
	}

	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "wrong-port", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: n.node, Containers: []corev1.Container{{
		Name: "nginx", Image: "docker.io/library/nginx:1.27",
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(8080)}}, PeriodSeconds: 1},
	}}}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		evs, err := n.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=wrong-port,reason=Unhealthy"})
		if err != nil || len(evs.Items) == 0 {
			return "no Unhealthy event for the probe on 8080 yet"
		}
		if !strings.Contains(evs.Items[0].Message, ":8080: connect: connection refused") {
			t.Fatalf("event %q", evs.Items[0].Message)
		}
		return ""
	})
	if got, _ := n.client.CoreV1().Pods("default").Get(ctx, "wrong-port", metav1.GetOptions{}); podReady(got) {
		t.Error("Ready although its readiness probe's port is not served")
	}
}
