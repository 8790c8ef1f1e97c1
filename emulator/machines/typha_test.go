package machines_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/internal/poll"
)

// typhaRules are calico-node's role as the Typha manifest grants it to
// calico-node and Typha alike (serviceAccountName: calico-node): every
// list of Felix's syncer and of Typha's other three, the reads of Felix's
// config loop, and get endpoints ("Used to discover Typhas"), less the
// list of without.
func typhaRules(without string) []rbacv1.PolicyRule {
	rules := felixRules("")
	var calico []string
	for _, r := range []string{"bgpfilters", "blockaffinities", "caliconodestatuses"} {
		if r != without {
			calico = append(calico, r)
		}
	}
	return append(rules,
		rbacv1.PolicyRule{APIGroups: []string{"crd.projectcalico.org"}, Resources: calico, Verbs: listWatch},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"get"}})
}

// typhaPod is the manifest's Typha pod (projectcalico/calico
// manifests/calico-typha.yaml, v3.30.7 74485ea4: the Deployment
// calico-typha, host network, ServiceAccount calico-node, its env and
// port) on node.
func (w *rightsWorld) typhaPod(t *testing.T, ctx context.Context, name, node string) *corev1.Pod {
	t.Helper()
	p, err := w.cs.CoreV1().Pods(w.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"k8s-app": "calico-typha"}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "calico-node", HostNetwork: true, Containers: []corev1.Container{{
			Name: "calico-typha", Image: "docker.io/calico/typha:v3.30.7",
			Ports: []corev1.ContainerPort{{ContainerPort: 5473, Name: "calico-typha", Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{
				{Name: "TYPHA_LOGSEVERITYSCREEN", Value: "info"}, {Name: "TYPHA_LOGFILEPATH", Value: "none"}, {Name: "TYPHA_LOGSEVERITYSYS", Value: "none"},
				{Name: "TYPHA_CONNECTIONREBALANCINGMODE", Value: "kubernetes"}, {Name: "TYPHA_DATASTORETYPE", Value: "kubernetes"},
				{Name: "TYPHA_HEALTHENABLED", Value: "true"}, {Name: "TYPHA_SHUTDOWNTIMEOUTSECS", Value: "300"},
				{Name: "TYPHA_K8SNAMESPACE", Value: w.ns}, // see felixWithTypha
			},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readiness", Port: intstr.FromInt32(9098)}}, PeriodSeconds: 10},
		}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runTypha runs a Typha pod's program on its node until stop or the test's end.
func runTypha(t *testing.T, node string, p *corev1.Pod) (netip.Addr, func()) {
	t.Helper()
	host, stop, ok := rt.RunTypha(node, p)
	if !ok {
		t.Fatalf("Typha did not start on %s", node)
	}
	t.Cleanup(stop)
	return host, stop
}

// felixWithTypha is calico-node as the Typha manifest ships it: Felix's
// FELIX_TYPHAK8SSERVICENAME from calico-config's typha_service_name. The
// world's namespace stands for kube-system (the manifest's, Felix's and
// Typha's default), so both name it as the operator's render names
// calico-system (FELIX_TYPHAK8SNAMESPACE, TYPHA_K8SNAMESPACE).
func (w *rightsWorld) felixWithTypha(t *testing.T, ctx context.Context, name, node string) *corev1.Pod {
	t.Helper()
	p := w.pod(t, ctx, name, node, "calico-node", corev1.Container{Name: "calico-node", Image: "docker.io/calico/node:v3.30.7",
		Env: []corev1.EnvVar{{Name: "FELIX_TYPHAK8SSERVICENAME", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "calico-config"}, Key: "typha_service_name"}}},
			{Name: "FELIX_TYPHAK8SNAMESPACE", Value: w.ns}}})
	if err := rt.StartComponents(node, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.StopComponents(node, p) })
	return p
}

// typhaEndpoints writes the Service's Endpoints as the endpoints
// controller does: ready Typhas' node addresses in addresses, the others
// in notReadyAddresses.
func (w *rightsWorld) typhaEndpoints(t *testing.T, ctx context.Context, ready, notReady map[string]string) {
	t.Helper()
	addrs := func(m map[string]string) []corev1.EndpointAddress {
		var out []corev1.EndpointAddress
		for node, ip := range m {
			out = append(out, corev1.EndpointAddress{IP: ip, NodeName: &node})
		}
		return out
	}
	//nolint:staticcheck // Typha's discovery reads core/v1 Endpoints (discovery.go), which the endpoints controller still writes
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "calico-typha", Namespace: w.ns}, Subsets: []corev1.EndpointSubset{{
		Addresses: addrs(ready), NotReadyAddresses: addrs(notReady),
		Ports: []corev1.EndpointPort{{Name: "calico-typha", Port: 5473, Protocol: corev1.ProtocolTCP}}}}}
	if len(ready)+len(notReady) == 0 {
		ep.Subsets = nil
	}
	old, err := w.cs.CoreV1().Endpoints(w.ns).Get(ctx, ep.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = w.cs.CoreV1().Endpoints(w.ns).Create(ctx, ep, metav1.CreateOptions{})
	case err == nil:
		ep.ResourceVersion = old.ResourceVersion
		_, err = w.cs.CoreV1().Endpoints(w.ns).Update(ctx, ep, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func typhaReadiness(host netip.Addr) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort(host.String(), "9098") + "/readiness")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

var felixReady = []string{"/bin/calico-node", "-felix-ready"}

func felixSynced(node string, p *corev1.Pod) string {
	if _, ok, msg := rt.ExecProbe(node, p, "calico-node", felixReady); !ok {
		return fmt.Sprintf("%s: %s", node, msg)
	}
	return ""
}

// TestFelixViaTypha: calico-node configured with a Typha Service takes
// Felix's updates from Typha, and fails as upstream's does without one
// (emulator/machines/typha/DESIGN.md 4.4):
//   - no Typha Deployment: Felix's discovery finds no Endpoints, logs it as
//     Felix does and redoes its config loop; it is not ready and its node
//     routes no pods;
//   - Typha started before its datastore answers (its cluster not known
//     here yet) retries its config loop and listens on nothing: a dial of
//     its sync port or its health port is refused until it is known;
//   - Typha lacking a list rule (bgpfilters): that syncer never gets in
//     sync, Typha's /readiness answers 503, its address is not ready, and
//     Felix stays out of sync; with the rule, all of it comes right;
//   - a Felix starting against a ready Typha sends at most 8 requests with
//     its token (its config loop, one discovery), not its own ~30 lists
//     and watches;
//   - one of two Typhas deleted: its Felix loses the connection, exits,
//     and is back in sync through the other.
func TestFelixViaTypha(t *testing.T) {
	ctx := context.Background()
	w := newRightsWorld(t, ctx, "typha")
	a, b := "typha-a", "typha-b"
	ipA, ipB := "10.47.0.4", "10.47.0.5" // the nodes' VNet addresses (newRightsWorld)
	w.role(t, ctx, "calico-node", typhaRules("bgpfilters")...)
	if _, err := w.cs.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "calico-config"},
		Data: map[string]string{"typha_service_name": "calico-typha"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	target := w.servePod(t, "192.168.2.10") // a pod of node b

	felixA := w.felixWithTypha(t, ctx, "calico-node-a", a)
	t.Run("no Typha", func(t *testing.T) {
		const discovery = `Typha discovery enabled but discovery failed. error=endpoints "calico-typha" not found`
		poll.Until(t, time.Minute, func() string {
			if msg := felixSynced(a, felixA); !strings.Contains(msg, discovery) {
				return "Felix's readiness does not give the discovery error: " + msg
			}
			if l := w.log(a, vmdisk.Containerd); !strings.Contains(l, discovery) {
				return "node a's log does not show Felix's discovery error:\n" + l
			}
			return ""
		})
		if c, err := rt.DialFromNode(ctx, a, target); err == nil || !strings.Contains(err.Error(), "no route to host") {
			if c != nil {
				c.Close()
			}
			t.Errorf("node a reached a pod of node b while Felix has no Typha: %v", err)
		}
	})

	var svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "calico-typha", Namespace: w.ns, Labels: map[string]string{"k8s-app": "calico-typha"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "calico-typha"},
			Ports: []corev1.ServicePort{{Name: "calico-typha", Port: 5473, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("calico-typha")}}}}
	if _, err := w.cs.CoreV1().Services(w.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	typhaA := w.typhaPod(t, ctx, "calico-typha-a", a)
	// Typha a starts before its datastore can be reached: its node was
	// resumed from its disk ahead of its control plane.
	restore := rt.HideCluster(a)
	hostA, stopA := runTypha(t, a, typhaA)
	t.Run("Typha before its datastore answers", func(t *testing.T) {
		defer restore()
		poll.Until(t, time.Minute, func() string {
			const retrying = "calico-typha: Failed to load configuration (retrying every second): the cluster's control plane is not run here yet"
			if l := w.log(a, vmdisk.Containerd); !strings.Contains(l, retrying) {
				return "node a's log does not show Typha's config loop retrying:\n" + l
			}
			return ""
		})
		// Its sync server and health server are not open yet: a Felix's
		// dial is refused (it tries another Typha), the probe fails.
		for _, port := range []string{"5473", "9098"} {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(hostA.String(), port), 2*time.Second)
			switch {
			case err == nil:
				c.Close()
				t.Errorf("Typha a accepts connections on port %s before it reached its datastore", port)
			case !errors.Is(err, syscall.ECONNREFUSED):
				t.Errorf("dialling Typha a's port %s before it reached its datastore: %v, want connection refused", port, err)
			}
		}
		restore()
		poll.Until(t, time.Minute, func() string {
			if code, body := typhaReadiness(hostA); code == 0 {
				return "Typha a's health server does not answer once its cluster is known: " + body
			}
			return ""
		})
	})

	t.Run("Typha lacking a list rule", func(t *testing.T) {
		w.typhaEndpoints(t, ctx, nil, map[string]string{a: ipA})
		poll.Until(t, time.Minute, func() string {
			code, body := typhaReadiness(hostA)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "bgp syncer is resync-in-progress") {
				return fmt.Sprintf("Typha's readiness answers %d %q, want 503 for its bgp syncer", code, body)
			}
			if l := w.log(a, vmdisk.Containerd); !strings.Contains(l, "bgp syncer: failed to list bgpfilters.crd.projectcalico.org") || !strings.Contains(l, "forbidden") {
				return "node a's log does not show Typha's refused list:\n" + l
			}
			if msg := felixSynced(a, felixA); !strings.Contains(msg, "Kubernetes service missing IP or port") {
				return "Felix's readiness does not say Typha has no ready address: " + msg
			}
			return ""
		})

		// The rule back, Typha's syncer gets in sync (it retries every
		// second), its probe passes, the endpoints controller marks it
		// ready, and Felix (its config loop every second) connects.
		w.role(t, ctx, "calico-node", typhaRules("")...)
		poll.Until(t, time.Minute, func() string {
			if code, body := typhaReadiness(hostA); code != http.StatusOK {
				return fmt.Sprintf("Typha's readiness answers %d %q", code, body)
			}
			return ""
		})
		w.typhaEndpoints(t, ctx, map[string]string{a: ipA}, nil)
		poll.Until(t, time.Minute, func() string { return felixSynced(a, felixA) })
	})

	var felixB *corev1.Pod
	top := t // Felix b outlives this subtest
	t.Run("in sync through Typha with few requests", func(t *testing.T) {
		felixB = w.felixWithTypha(top, ctx, "calico-node-b", b)
		poll.Until(t, time.Minute, func() string { return felixSynced(b, felixB) })
		// Felix's config loop (6 reads) and one discovery: its own
		// lists and watches are Typha's now.
		if n := rt.ComponentReads(b); n > 8 {
			t.Errorf("Felix on node b sent %d requests with its token to get in sync via Typha, want at most 8", n)
		} else {
			t.Logf("Felix via Typha: %d requests to get in sync", n)
		}
		poll.Until(t, time.Minute, func() string {
			c, err := rt.DialFromNode(ctx, a, target)
			if err != nil {
				return "node a does not reach node b's pod: " + err.Error()
			}
			c.Close()
			return ""
		})
	})

	var typhaB *corev1.Pod
	var hostB netip.Addr
	t.Run("one of two Typhas deleted", func(t *testing.T) {
		if felixB == nil {
			t.Skip("no Felix on node b: the previous subtest failed")
		}
		typhaB = w.typhaPod(t, ctx, "calico-typha-b", b)
		hostB, _ = runTypha(top, b, typhaB) // it serves the next subtests too
		poll.Until(t, time.Minute, func() string {
			if code, body := typhaReadiness(hostB); code != http.StatusOK {
				return fmt.Sprintf("Typha b's readiness answers %d %q", code, body)
			}
			return ""
		})
		w.typhaEndpoints(t, ctx, map[string]string{a: ipA, b: ipB}, nil)
		// Typha a's pod goes: its program stops and the endpoints
		// controller drops its address.
		if err := w.cs.CoreV1().Pods(w.ns).Delete(ctx, typhaA.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		stopA()
		w.typhaEndpoints(t, ctx, map[string]string{b: ipB}, nil)
		// Felix a preferred the Typha of its own node: it lost it.
		poll.Until(t, time.Minute, func() string {
			if l := w.log(a, vmdisk.Containerd); !strings.Contains(l, "Felix exits (connection to Typha failed") {
				return "node a's log does not show Felix exiting on its lost Typha:\n" + l
			}
			return ""
		})
		poll.Until(t, time.Minute, func() string {
			for node, p := range map[string]*corev1.Pod{a: felixA, b: felixB} {
				if msg := felixSynced(node, p); msg != "" {
					return msg
				}
			}
			if code, _ := typhaReadiness(hostA); code != 0 {
				return fmt.Sprintf("deleted Typha a still answers its readiness (%d)", code)
			}
			return ""
		})
	})

	// Calico for Windows as the operator renders it (FELIX_TYPHAK8S* set
	// directly, tigera/operator pkg/render/windows.go v1.38.16) reaches
	// the Linux node's Typha at its node address: no Service IP, so no
	// kube-proxy, which on Windows waits for the CNI.
	t.Run("Windows Felix before kube-proxy", func(t *testing.T) {
		if felixB == nil {
			t.Skip("no Typha on node b: an earlier subtest failed")
		}
		// Its install-cni (the same component) starts first, without
		// Felix's variables: the session is Felix's all the same.
		p, err := w.cs.CoreV1().Pods(w.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "calico-node-windows-b"},
			Spec: corev1.PodSpec{NodeName: b, ServiceAccountName: "calico-node", HostNetwork: true, Containers: []corev1.Container{
				{Name: "install-cni", Image: "docker.io/calico/cni-windows:v3.30.7"},
				{Name: "felix", Image: "docker.io/calico/node-windows:v3.30.7",
					Env: []corev1.EnvVar{{Name: "FELIX_TYPHAK8SSERVICENAME", Value: "calico-typha"}, {Name: "FELIX_TYPHAK8SNAMESPACE", Value: w.ns}}},
			}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.StartWindowsComponents(b, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.StopComponents(b, p) })
		poll.Until(t, time.Minute, func() string { return felixSynced(b, p) })
		if !strings.Contains(w.log(b, vmdisk.Containerd), "calico-node-windows-b (calico-node-windows): Felix takes its updates from Typha") {
			t.Error("the Windows Felix did not take its updates from Typha")
		}
		k8s, err := w.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := rt.DialFromNode(ctx, b, net.JoinHostPort(k8s.Spec.ClusterIP, "443"))
		if err == nil {
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "nothing routes Service IPs") {
			t.Errorf("node b's kube-proxy runs (a Service IP answered %v): the test shows nothing of Typha before kube-proxy", err)
		}
	})

	// The local world's node addresses are loopback ones, which the API
	// server refuses in Endpoints: the endpoints controllers leave a
	// Service of host-network pods without addresses. Felix then finds
	// the ready Typha pods as the controller would have listed them.
	t.Run("Typha at a loopback node address", func(t *testing.T) {
		if typhaB == nil {
			t.Skip("no Typha on node b: an earlier subtest failed")
		}
		w.typhaEndpoints(t, ctx, nil, nil)
		typhaB.Status.PodIP, typhaB.Status.PodIPs = hostB.String(), []corev1.PodIP{{IP: hostB.String()}}
		typhaB.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := w.cs.CoreV1().Pods(w.ns).UpdateStatus(ctx, typhaB, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := w.felixWithTypha(t, ctx, "calico-node-a2", a)
		poll.Until(t, time.Minute, func() string { return felixSynced(a, p) })
	})
}
