package kubeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

var (
	client kubernetes.Interface
	block  *hostnet.Block
	addrMu sync.Mutex
	next   netip.Addr
)

// TestMain runs a real API server: Services get their ClusterIPs, NodePorts
// and healthCheckNodePorts allocated as in a cluster.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		var err error
		if block, err = hostnet.ClaimBlock(-1); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer block.Release()
		next = block.Hosts.Addr().Next()
		return testenv.Main(m, testenv.Options{}, func(e *testenv.Env) {
			if client, err = kubernetes.NewForConfig(e.Config); err != nil {
				panic(err)
			}
		})
	}())
}

// address hands out a loopback address of this test process's block.
func address() netip.Addr {
	addrMu.Lock()
	defer addrMu.Unlock()
	a := next
	next = next.Next()
	return a
}

// world maps pod IPs to host addresses, where the tests' backends listen
// and say who they are.
type world struct {
	mu   sync.Mutex
	pods map[string]netip.Addr
}

func (w *world) podAddr(ip string) (netip.Addr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.pods[ip]
	if !ok {
		return netip.Addr{}, errors.New("unknown pod IP " + ip)
	}
	return a, nil
}

// backend serves "pod IP" on port at a fresh host address for ip.
func (w *world) backend(t *testing.T, ip string, port int) {
	t.Helper()
	a := address()
	w.mu.Lock()
	w.pods[ip] = a
	w.mu.Unlock()
	ln, err := net.Listen("tcp", net.JoinHostPort(a.String(), strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprint(rw, ip) }), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func newCluster(t *testing.T) (*Cluster, *world) {
	t.Helper()
	w := &world{pods: map[string]netip.Addr{}}
	c := NewCluster(client, w.podAddr, logr.Discard())
	t.Cleanup(c.Stop)
	return c, w
}

type testNode struct {
	*Node
	dir string
}

func (c *Cluster) testNode(t *testing.T, name string, windows bool, kernel string) *testNode {
	t.Helper()
	dir := t.TempDir()
	n := c.Node(NodeConfig{NodeName: name, Address: address(), Windows: windows, KernelVersion: kernel, Logs: vmdisk.NewLogs(vmdisk.Disk{Root: dir, Windows: windows})})
	n.SetActive(true)
	t.Cleanup(n.Close)
	return &testNode{Node: n, dir: dir}
}

func (n *testNode) log() string {
	p, _ := vmdisk.Disk{Root: n.dir, Windows: n.cfg.Windows}.HostPath(vmdisk.LogPath(n.cfg.Windows, LogService))
	b, _ := os.ReadFile(filepath.Clean(p))
	return string(b)
}

// service creates a Service and one EndpointSlice of ready endpoints,
// pod IP -> node name.
func newService(t *testing.T, name string, spec corev1.ServiceSpec, eps map[string]string) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	if len(spec.Ports) == 0 {
		spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}
	}
	svc, err := client.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for ip, node := range eps {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = client.DiscoveryV1().EndpointSlices("default").Delete(context.Background(), sl.Name, metav1.DeleteOptions{})
	})
	return svc
}

// get fetches a URL with a fresh connection each time.
func get(url string) (int, string, error) {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func nodePortURL(n *testNode, svc *corev1.Service) string {
	return "http://" + net.JoinHostPort(n.cfg.Address.String(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort))) + "/"
}

// answers waits until url answers with a body containing want.
func answers(t *testing.T, url, want string) {
	t.Helper()
	poll.Until(t, 30*time.Second, func() string {
		code, body, err := get(url)
		if err != nil || code != 200 || !strings.Contains(body, want) {
			return fmt.Sprintf("%s: %d %q %v", url, code, body, err)
		}
		return ""
	})
}

// synced waits until the proxy knows a Service with its endpoints.
func synced(t *testing.T, c *Cluster, key string, endpoints int) {
	t.Helper()
	poll.Until(t, 30*time.Second, func() string {
		if s := c.get(key); s == nil || len(s.endpoints) != endpoints {
			return fmt.Sprintf("the proxy has not seen Service %s with %d endpoints", key, endpoints)
		}
		return ""
	})
}

func refuses(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// TestNodePortForwardsToReadyEndpoints: a NodePort Service answers on every
// active node from its ready endpoints, in turn; a node whose kube-proxy
// has not run serves nothing; no ready endpoint refuses.
func TestNodePortForwardsToReadyEndpoints(t *testing.T) {
	c, w := newCluster(t)
	w.backend(t, "10.244.1.10", 8080)
	w.backend(t, "10.244.2.10", 8080)
	a := c.testNode(t, "node-a", false, "6.8.0-1021-azure")
	idle := c.Node(NodeConfig{NodeName: "node-idle", Address: address()})
	t.Cleanup(idle.Close)
	svc := newService(t, "web", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"}},
		map[string]string{"10.244.1.10": "node-a", "10.244.2.10": "node-b"})
	answers(t, nodePortURL(a, svc), "10.244.")
	seen := map[string]bool{}
	for range 4 {
		_, body, err := get(nodePortURL(a, svc))
		if err != nil {
			t.Fatal(err)
		}
		seen[body] = true
	}
	if len(seen) != 2 {
		t.Errorf("connections went to %v, want both endpoints", seen)
	}
	if addr := net.JoinHostPort(idle.cfg.Address.String(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort))); !refuses(addr) {
		t.Errorf("the node without a running kube-proxy serves %s", addr)
	}

	empty := newService(t, "empty", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "none"}}, nil)
	// The first Service's answers show the proxy has synced; the second's
	// sync is queued after it, so wait for the proxy to have seen it.
	synced(t, c, "default/empty", 0)
	if addr := net.JoinHostPort(a.cfg.Address.String(), strconv.Itoa(int(empty.Spec.Ports[0].NodePort))); !refuses(addr) {
		t.Errorf("a Service without endpoints does not refuse at %s", addr)
	}
}

// TestExternalTrafficPolicyLocal: the healthCheckNodePort answers 200 and
// kube-proxy's JSON on a node with a local endpoint, 503 elsewhere.
func TestExternalTrafficPolicyLocal(t *testing.T) {
	c, w := newCluster(t)
	w.backend(t, "10.244.1.20", 8080)
	a := c.testNode(t, "node-a", false, "")
	b := c.testNode(t, "node-b", false, "")
	svc := newService(t, "local", corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Selector: map[string]string{"app": "l"}},
		map[string]string{"10.244.1.20": "node-a"})
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Fatal("the API server allocated no healthCheckNodePort")
	}
	hc := func(n *testNode) string {
		return "http://" + net.JoinHostPort(n.cfg.Address.String(), strconv.Itoa(int(svc.Spec.HealthCheckNodePort))) + "/healthz"
	}
	answers(t, hc(a), `"localEndpoints":1`)
	_, body, _ := get(hc(a))
	var doc struct {
		Service        struct{ Namespace, Name string } `json:"service"`
		LocalEndpoints int                              `json:"localEndpoints"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Service.Namespace != "default" || doc.Service.Name != "local" || doc.LocalEndpoints != 1 {
		t.Errorf("health check body %s (%v)", body, err)
	}
	poll.Until(t, 30*time.Second, func() string {
		code, body, err := get(hc(b))
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, `"localEndpoints":0`) {
			return fmt.Sprintf("node-b's health check: %d %q %v", code, body, err)
		}
		return ""
	})
	answers(t, nodePortURL(a, svc), "10.244.1.20")
	// node-b has no local endpoint: the connection is dropped, not sent on.
	if code, body, err := get(nodePortURL(b, svc)); err == nil {
		t.Errorf("node-b forwarded a Local Service's connection: %d %q", code, body)
	}
}

// TestWindowsLoadBalancerLimit: a Service of 65 endpoints is refused by the
// data plane of a Windows Server 2019 build from before the limit was
// raised, which logs kube-proxy's error and leaves the NodePort unserved;
// a newer build serves it.
func TestWindowsLoadBalancerLimit(t *testing.T) {
	c, w := newCluster(t)
	eps := map[string]string{}
	for i := range 65 {
		ip := fmt.Sprintf("10.244.3.%d", 10+i)
		w.backend(t, ip, 8080)
		eps[ip] = "node-x"
	}
	oldBuild := c.testNode(t, "win-old", true, "10.0.17763.1817")
	newBuild := c.testNode(t, "win-new", true, "10.0.17763.6532")
	svc := newService(t, "many", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "many"}}, eps)
	answers(t, nodePortURL(newBuild, svc), "10.244.3.")
	poll.Until(t, 30*time.Second, func() string {
		if !strings.Contains(oldBuild.log(), "Unable to initialize VFP LB rule: invalid number of destinations") {
			return "no hcnCreateLoadBalancer failure in win-old's kube-proxy log:\n" + oldBuild.log()
		}
		return ""
	})
	if !strings.Contains(oldBuild.log(), "hcnCreateLoadBalancer failed") {
		t.Errorf("log %s", oldBuild.log())
	}
	if addr := net.JoinHostPort(oldBuild.cfg.Address.String(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort))); !refuses(addr) {
		t.Errorf("win-old serves the 65-endpoint Service at %s", addr)
	}
	if strings.Contains(newBuild.log(), "invalid number of destinations") {
		t.Errorf("win-new refused: %s", newBuild.log())
	}
	// Other clients reach win-new's NodePort; win-new itself does not.
	own := net.JoinHostPort(newBuild.cfg.Address.String(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	if handled, err := newBuild.DialOwnNodePort(own, own); !handled || err == nil {
		t.Errorf("a Windows node reaches its own NodePort %s", own)
	}
	linux := c.testNode(t, "linux", false, "")
	if handled, _ := linux.DialOwnNodePort(net.JoinHostPort(linux.cfg.Address.String(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort))), ""); handled {
		t.Error("a Linux node is refused its own NodePort")
	}
}

// TestClusterIPFromTheNode: the node's own dialer reaches a ClusterIP
// through its kube-proxy, keeps a ClientIP-affine client on one endpoint,
// and a Windows Server 2019 host cannot reach Service VIPs.
func TestClusterIPFromTheNode(t *testing.T) {
	c, w := newCluster(t)
	w.backend(t, "10.244.1.30", 8080)
	w.backend(t, "10.244.1.31", 8080)
	linux := c.testNode(t, "node-a", false, "")
	win2019 := c.testNode(t, "win-2019", true, "10.0.17763.6532")
	win2022 := c.testNode(t, "win-2022", true, "10.0.20348.2849")
	eps := map[string]string{"10.244.1.30": "node-a", "10.244.1.31": "node-b"}
	svc := newService(t, "api", corev1.ServiceSpec{Selector: map[string]string{"app": "api"}}, eps)
	sticky := newService(t, "sticky", corev1.ServiceSpec{Selector: map[string]string{"app": "api"}, SessionAffinity: corev1.ServiceAffinityClientIP}, eps)
	fetch := func(n *testNode, s *corev1.Service) (string, error) {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				conn, handled, err := n.DialService(ctx, addr)
				if !handled && err == nil {
					return nil, errors.New(addr + " is no Service")
				}
				return conn, err
			}}}
		resp, err := cl.Get("http://" + net.JoinHostPort(s.Spec.ClusterIP, "80") + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	synced(t, c, "default/api", 2)
	synced(t, c, "default/sticky", 2)
	seen := map[string]bool{}
	for range 4 {
		body, err := fetch(linux, svc)
		if err != nil {
			t.Fatal(err)
		}
		seen[body] = true
	}
	if len(seen) != 2 {
		t.Errorf("ClusterIP connections went to %v, want both endpoints", seen)
	}
	first, err := fetch(linux, sticky)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if body, err := fetch(linux, sticky); err != nil || body != first {
			t.Fatalf("ClientIP affinity: %q then %q (%v)", first, body, err)
		}
	}
	// The affinity lasts its timeout, then the client is balanced again.
	short := newService(t, "sticky-short", corev1.ServiceSpec{Selector: map[string]string{"app": "api"}, SessionAffinity: corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](1)}}}, eps)
	synced(t, c, "default/sticky-short", 2)
	first, err = fetch(linux, short)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := fetch(linux, short); err != nil || body != first {
		t.Fatalf("within the timeout: %q then %q (%v)", first, body, err)
	}
	linux.mu.Lock()
	linux.now = func() time.Time { return time.Now().Add(2 * time.Second) }
	linux.mu.Unlock()
	if body, err := fetch(linux, short); err != nil || body == first {
		t.Errorf("still %q after the affinity's 1s timeout (%v)", body, err)
	}
	if _, err := fetch(win2019, svc); err == nil || !strings.Contains(err.Error(), "cannot reach Service VIPs") {
		t.Errorf("a Windows Server 2019 host reached a ClusterIP: %v", err)
	}
	if body, err := fetch(win2022, svc); err != nil || !strings.HasPrefix(body, "10.244.1.3") {
		t.Errorf("a Windows Server 2022 host: %q %v", body, err)
	}
}

// overlayNode is a Windows node whose CNI made an HNS network of typ.
func (c *Cluster) overlayNode(t *testing.T, name, kernel, typ string) *testNode {
	t.Helper()
	dir := t.TempDir()
	n := c.Node(NodeConfig{NodeName: name, Address: address(), Windows: true, KernelVersion: kernel,
		HNSNetworkType: func() string { return typ }, Logs: vmdisk.NewLogs(vmdisk.Disk{Root: dir, Windows: true})})
	n.SetActive(true)
	t.Cleanup(n.Close)
	return &testNode{Node: n, dir: dir}
}

// logs waits until the node's kube-proxy log holds want.
func logs(t *testing.T, n *testNode, want string) {
	t.Helper()
	poll.Until(t, 30*time.Second, func() string {
		if !strings.Contains(n.log(), want) {
			return fmt.Sprintf("no %q in %s's kube-proxy log:\n%s", want, n.cfg.NodeName, n.log())
		}
		return ""
	})
}

// TestWindowsLocalTrafficWithoutDSR: externalTrafficPolicy Local keeps a
// NodePort's connections on the node's own endpoints only where HNS has
// DSR; a Windows Server 2019 build before it forwards them to another
// node's endpoint, as for Cluster, while its health check still reports
// no local endpoint.
func TestWindowsLocalTrafficWithoutDSR(t *testing.T) {
	c, w := newCluster(t)
	w.backend(t, "10.244.1.40", 8080)
	dsr := c.testNode(t, "win-dsr", true, "10.0.17763.1817")
	noDSR := c.testNode(t, "win-nodsr", true, "10.0.17763.1339")
	svc := newService(t, "local-win", corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Selector: map[string]string{"app": "lw"}},
		map[string]string{"10.244.1.40": "node-a"})
	answers(t, nodePortURL(noDSR, svc), "10.244.1.40")
	logs(t, noDSR, `"Flags enabled for service" service="local-win" localTrafficDSR=false`)
	if code, body, err := get(nodePortURL(dsr, svc)); err == nil {
		t.Errorf("a Windows node with DSR forwarded a Local Service's connection to another node's endpoint: %d %q", code, body)
	}
	if strings.Contains(dsr.log(), "localTrafficDSR=false") {
		t.Errorf("win-dsr logs no DSR: %s", dsr.log())
	}
	hc := "http://" + net.JoinHostPort(noDSR.cfg.Address.String(), strconv.Itoa(int(svc.Spec.HealthCheckNodePort))) + "/healthz"
	if code, body, err := get(hc); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("win-nodsr's health check: %d %q %v, want 503: a cloud load balancer still takes it out", code, body, err)
	}
	if strings.Count(noDSR.log(), "localTrafficDSR=false") != 1 {
		t.Errorf("the notice is logged more than once:\n%s", noDSR.log())
	}
}

// TestWindowsSessionAffinity: ClientIP affinity keeps an external client's
// connections to a NodePort on one endpoint on Windows Server 2022, even
// past timeoutSeconds, which HNS has no place for; on Windows Server 2019
// kube-proxy logs that the build cannot and the connections spread.
func TestWindowsSessionAffinity(t *testing.T) {
	c, w := newCluster(t)
	w.backend(t, "10.244.1.50", 8080)
	w.backend(t, "10.244.1.51", 8080)
	win2019 := c.testNode(t, "win-2019", true, "10.0.17763.6532")
	win2022 := c.testNode(t, "win-2022", true, "10.0.20348.2849")
	linux := c.testNode(t, "linux", false, "")
	svc := newService(t, "sticky-win", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "sw"}, SessionAffinity: corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](1)}}},
		map[string]string{"10.244.1.50": "node-a", "10.244.1.51": "node-b"})
	answers(t, nodePortURL(win2022, svc), "10.244.1.5")
	answers(t, nodePortURL(win2019, svc), "10.244.1.5")
	answers(t, nodePortURL(linux, svc), "10.244.1.5")
	logs(t, win2019, `"Session Affinity is not supported on this version of Windows" service="default/sticky-win"`)
	if strings.Contains(win2022.log(), "Session Affinity is not supported") {
		t.Errorf("win-2022 says it has no affinity: %s", win2022.log())
	}
	bodies := func(n *testNode, count int) map[string]bool {
		seen := map[string]bool{}
		for range count {
			_, body, err := get(nodePortURL(n, svc))
			if err != nil {
				t.Fatal(err)
			}
			seen[body] = true
		}
		return seen
	}
	if seen := bodies(win2019, 4); len(seen) != 2 {
		t.Errorf("win-2019 kept a client on %v: it has no ClientIP affinity", seen)
	}
	first := bodies(win2022, 4)
	if len(first) != 1 {
		t.Fatalf("win-2022 spread one client over %v", first)
	}
	later := func(n *testNode) {
		n.mu.Lock()
		n.now = func() time.Time { return time.Now().Add(2 * time.Second) }
		n.mu.Unlock()
	}
	later(win2022)
	if seen := bodies(win2022, 4); len(seen) != 1 || !maps.Equal(seen, first) {
		t.Errorf("win-2022 moved the client from %v to %v after timeoutSeconds, which HNS does not have", first, seen)
	}
	// Linux's iptables honours the timeout: the client is balanced anew.
	was := bodies(linux, 1)
	later(linux)
	if now := bodies(linux, 1); maps.Equal(now, was) {
		t.Errorf("linux kept the client on %v past its 1s affinity", now)
	}
}

// setService gives the proxy a Service the test's single-stack API server
// cannot hold (an IPv6 or dual-stack one), as its informers would.
func setService(t *testing.T, c *Cluster, s *service, nodes ...*testNode) {
	t.Helper()
	c.mu.Lock()
	c.services[s.key] = s
	c.mu.Unlock()
	t.Cleanup(func() {
		c.mu.Lock()
		delete(c.services, s.key)
		c.mu.Unlock()
		for _, n := range nodes {
			n.apply(s.key)
		}
	})
	for _, n := range nodes {
		n.apply(s.key)
	}
}

// TestWindowsOverlayIPv6: kube-proxy on a Windows overlay node falls back
// to IPv4 single-stack: an IPv6 Service is not programmed there (its
// NodePort refuses, its ClusterIP is unreachable) and a dual-stack one is
// served over its IPv4 endpoints only; an L2Bridge node serves both.
func TestWindowsOverlayIPv6(t *testing.T) {
	c, w := newCluster(t)
	w.backend(t, "fd00:10:244:1::60", 8080)
	w.backend(t, "10.244.1.60", 8080)
	w.backend(t, "fd00:10:244:1::61", 8080)
	overlay := c.overlayNode(t, "win-overlay", "10.0.20348.2849", "Overlay")
	bridge := c.overlayNode(t, "win-bridge", "10.0.20348.2849", "L2Bridge")
	logs(t, overlay, `"Winoverlay does not support dual-stack, falling back to single-stack"`)
	logs(t, overlay, `"kube-proxy running in single-stack mode" ipFamily="IPv4"`)
	if strings.Contains(bridge.log(), "single-stack") {
		t.Errorf("the L2Bridge node fell back to single-stack: %s", bridge.log())
	}
	ep := func(addr string) endpoint {
		return endpoint{addr: addr, node: "node-a", ports: map[string]int32{"http": 8080}}
	}
	v6 := &service{key: "default/v6-only", namespace: "default", name: "v6-only", typ: corev1.ServiceTypeNodePort, clusterIPs: []string{"fd00:96::10"},
		ports: []servicePort{{name: "http", port: 80, nodePort: 31061}}, endpoints: []endpoint{ep("fd00:10:244:1::60")}}
	dual := &service{key: "default/dual", namespace: "default", name: "dual", typ: corev1.ServiceTypeNodePort, clusterIPs: []string{"10.96.0.62", "fd00:96::62"},
		ports: []servicePort{{name: "http", port: 80, nodePort: 31062}}, endpoints: []endpoint{ep("10.244.1.60"), ep("fd00:10:244:1::61")}}
	setService(t, c, v6, overlay, bridge)
	setService(t, c, dual, overlay, bridge)
	url := func(n *testNode, port int) string {
		return "http://" + net.JoinHostPort(n.cfg.Address.String(), strconv.Itoa(port)) + "/"
	}
	if addr := net.JoinHostPort(overlay.cfg.Address.String(), "31061"); !refuses(addr) {
		t.Errorf("the overlay node serves the IPv6 Service's NodePort %s", addr)
	}
	answers(t, url(bridge, 31061), "fd00:10:244:1::60")
	for range 4 {
		if _, body, err := get(url(overlay, 31062)); err != nil || body != "10.244.1.60" {
			t.Errorf("the overlay node's dual-stack NodePort: %q %v, want the IPv4 endpoint only", body, err)
		}
	}
	if _, _, err := overlay.DialService(context.Background(), "[fd00:96::10]:80"); err == nil || !strings.Contains(err.Error(), "network is unreachable") {
		t.Errorf("the overlay node reached an IPv6 ClusterIP: %v", err)
	}
	conn, handled, err := overlay.DialService(context.Background(), "10.96.0.62:80")
	if err != nil || !handled {
		t.Fatalf("the overlay node's IPv4 ClusterIP of the dual-stack Service: %v", err)
	}
	conn.Close()
	conn, _, err = bridge.DialService(context.Background(), "[fd00:96::10]:80")
	if err != nil {
		t.Fatalf("the L2Bridge node's IPv6 ClusterIP: %v", err)
	}
	conn.Close()
}

// TestRulesOutliveKubeProxy: while a node's kube-proxy pod is replaced,
// the rules it programmed keep carrying a Service's traffic through the
// node, as they were: an endpoint added meanwhile is reached only once a
// kube-proxy runs again. A new kube-proxy on Windows deletes the node's
// HNS policies when it starts, so there the Service answers again only
// after it synced.
func TestRulesOutliveKubeProxy(t *testing.T) {
	ctx := context.Background()
	c, w := newCluster(t)
	w.backend(t, "10.244.1.30", 8080)
	w.backend(t, "10.244.1.31", 8080)
	lin := c.testNode(t, "node-lin", false, "6.8.0-1021-azure")
	win := c.testNode(t, "node-win", true, "10.0.20348.2700")
	svc := newService(t, "kept", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "kept"}},
		map[string]string{"10.244.1.30": "node-lin"})
	clusterIP := net.JoinHostPort(svc.Spec.ClusterIP, "80")
	for _, n := range []*testNode{lin, win} {
		answers(t, nodePortURL(n, svc), "10.244.1.30")
	}

	// The kube-proxy pods are deleted: the Service still answers through
	// both nodes, and from the node itself.
	lin.SetActive(false)
	win.SetActive(false)
	for _, n := range []*testNode{lin, win} {
		for i := range 3 {
			if code, body, err := get(nodePortURL(n, svc)); err != nil || code != 200 || body != "10.244.1.30" {
				t.Fatalf("connection %d to %s's NodePort while its kube-proxy pod is replaced: %d %q %v, want the endpoint it programmed", i, n.cfg.NodeName, code, body, err)
			}
		}
	}
	conn, _, err := lin.DialService(ctx, clusterIP)
	if err != nil {
		t.Fatalf("the node reaches the ClusterIP %s no more once its kube-proxy pod is gone: %v", clusterIP, err)
	}
	conn.Close()

	// An endpoint added while no kube-proxy runs is not programmed.
	sl, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kept-abc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.1.31"}, NodeName: ptr.To("node-lin"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	synced(t, c, "default/kept", 2)
	for i := range 4 {
		if _, body, err := get(nodePortURL(lin, svc)); err != nil || body != "10.244.1.30" {
			t.Fatalf("connection %d reached %q (%v) while no kube-proxy runs on the node: only the endpoint programmed before may answer", i, body, err)
		}
	}

	// The new kube-proxy starts. On Windows it deletes the node's
	// policies first; on Linux the old rules serve until it synced.
	lin.Started()
	win.Started()
	if addr := net.JoinHostPort(win.cfg.Address.String(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort))); !refuses(addr) {
		t.Errorf("the Windows node serves %s after its new kube-proxy deleted the HNS policies", addr)
	}
	if _, body, err := get(nodePortURL(lin, svc)); err != nil || body != "10.244.1.30" {
		t.Errorf("the Linux node's rules went when its new kube-proxy started, before it synced: %q %v", body, err)
	}
	lin.SetActive(true)
	win.SetActive(true)
	for _, n := range []*testNode{lin, win} {
		answers(t, nodePortURL(n, svc), "10.244.1.31")
	}
}

// TestClusterIPFromAPod: a pod's connection to a ClusterIP goes through
// its node's rules as the node's own do, but the Windows Server 2019
// host's limit (no Service VIPs from the host itself, windows.go) is the
// host's: its pods reach the VIP. A port the Service lacks is refused.
func TestClusterIPFromAPod(t *testing.T) {
	c, w := newCluster(t)
	w.backend(t, "10.244.1.40", 8080)
	win2019 := c.testNode(t, "win-2019", true, "10.0.17763.6532")
	svc := newService(t, "web", corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}, map[string]string{"10.244.1.40": "node-a"})
	synced(t, c, "default/web", 1)
	vip := net.JoinHostPort(svc.Spec.ClusterIP, "80")
	if _, _, err := win2019.DialService(context.Background(), vip); err == nil || !strings.Contains(err.Error(), "cannot reach Service VIPs") {
		t.Fatalf("the 2019 host itself: %v, want its limit", err)
	}
	conn, handled, err := win2019.DialServiceFromPod(context.Background(), vip, "10.244.2.7")
	if err != nil || !handled {
		t.Fatalf("a pod of the 2019 node to %s: handled %v, %v", vip, handled, err)
	}
	conn.Close()
	if _, handled, err := win2019.DialServiceFromPod(context.Background(), net.JoinHostPort(svc.Spec.ClusterIP, "81"), "10.244.2.7"); !handled || err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a port the Service lacks: handled %v, %v", handled, err)
	}
}

// TestNodePortWithoutARouteTakesNoConnection: a node with no route to any
// of a NodePort Service's endpoints (its CNI agent not in sync yet)
// completes no connection on the port, as a SYN DNATed to an unroutable
// pod is lost, so a TCP health probe of the port fails there. Once a route
// exists the port answers without any Service change, and it closes again
// when Rerouted says the routes went, even while no kube-proxy runs.
func TestNodePortWithoutARouteTakesNoConnection(t *testing.T) {
	c, w := newCluster(t)
	w.backend(t, "10.244.7.10", 8080)
	w.backend(t, "10.244.8.10", 8080)
	var routed atomic.Bool
	dir := t.TempDir()
	fresh := c.Node(NodeConfig{NodeName: "node-new", Address: address(), Logs: vmdisk.NewLogs(vmdisk.Disk{Root: dir}),
		PodRoute: func(ip netip.Addr) error {
			if routed.Load() {
				return nil
			}
			return fmt.Errorf("no route to host: %s", ip)
		}})
	fresh.SetActive(true)
	t.Cleanup(fresh.Close)
	old := c.testNode(t, "node-old", false, "6.8.0-1021-azure")
	svc := newService(t, "unrouted", corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "unrouted"}},
		map[string]string{"10.244.7.10": "node-w1", "10.244.8.10": "node-w2"})
	key := "default/unrouted"
	answers(t, nodePortURL(old, svc), "10.244.")
	poll.Until(t, 30*time.Second, func() string {
		fresh.mu.Lock()
		defer fresh.mu.Unlock()
		if _, ok := fresh.programmed[key]; !ok {
			return "the new node has not programmed the Service"
		}
		return ""
	})
	port := net.JoinHostPort(fresh.cfg.Address.String(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	if !refuses(port) {
		t.Fatalf("the node without a route to either endpoint completes connections on %s", port)
	}

	routed.Store(true)
	answers(t, "http://"+port+"/", "10.244.")

	routed.Store(false)
	fresh.SetActive(false)
	fresh.Rerouted()
	if !refuses(port) {
		t.Errorf("the node's NodePort %s still completes connections after its routes went", port)
	}
	routed.Store(true)
	answers(t, "http://"+port+"/", "10.244.")
}

// TestClusterIPBeforeTheRules: a connect from a node to a Service IP its
// kube-proxy has not programmed is not refused: its SYN is lost, and the
// kernel sends it again. The dial waits for the caller's deadline (Go's
// "i/o timeout"). On Linux a retransmission follows its connection's
// first NAT decision, so kube-proxy's rules programmed meanwhile do not
// save it and only a new connect reaches the Service; on Windows the
// retransmission after the rules is forwarded.
func TestClusterIPBeforeTheRules(t *testing.T) {
	for _, windows := range []bool{false, true} {
		t.Run(map[bool]string{false: "linux", true: "windows"}[windows], func(t *testing.T) {
			c, w := newCluster(t)
			w.backend(t, "10.244.1.50", 8080)
			svc := newService(t, "early", corev1.ServiceSpec{Selector: map[string]string{"app": "early"}}, map[string]string{"10.244.1.50": "node-early"})
			synced(t, c, "default/early", 1)
			cfg := NodeConfig{NodeName: "node-early", Address: address(), Logs: vmdisk.NewLogs(vmdisk.Disk{Root: t.TempDir(), Windows: windows})}
			if windows {
				cfg.Windows, cfg.KernelVersion = true, "10.0.20348.2849"
				cfg.HNSNetworkType = func() string { return "Overlay" }
			}
			n := c.Node(cfg)
			t.Cleanup(n.Close)
			addr := net.JoinHostPort(svc.Spec.ClusterIP, "80")

			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, handled, err := n.DialService(ctx, addr)
			cancel()
			if !handled || err == nil || !strings.Contains(err.Error(), "i/o timeout") {
				t.Fatalf("a dial before the rules: handled %v, %v; want an i/o timeout", handled, err)
			}
			if ctx.Err() == nil {
				t.Fatalf("the dial failed before its deadline: %v", err)
			}

			// kube-proxy programs the Service once the first SYN was
			// lost, while the SYN is retried: the first retransmission
			// is at 1 s (Linux) or 3 s (Windows).
			ctx, cancel = context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			programmed := make(chan struct{})
			firstSYNLost = func() {
				firstSYNLost = func() {}
				go func() {
					n.SetActive(true)
					close(programmed)
				}()
			}
			t.Cleanup(func() { firstSYNLost = func() {} })
			conn, _, err := n.DialService(ctx, addr)
			<-programmed
			switch {
			case windows && err != nil:
				t.Fatalf("VFP forwards the retransmission after the rules, yet the dial failed: %v", err)
			case !windows && (err == nil || !strings.Contains(err.Error(), "i/o timeout")):
				t.Fatalf("a Linux connect whose first SYN went out before the rules: %v; want an i/o timeout", err)
			}
			if conn != nil {
				conn.Close()
			}
			// A new connect is a new connection, NATed by the rules.
			ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if conn, _, err = n.DialService(ctx, addr); err != nil {
				t.Fatalf("a connect after the rules: %v", err)
			}
			conn.Close()
		})
	}
}
