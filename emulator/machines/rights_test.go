package machines_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/internal/poll"
)

// rightsWorld is two nodes of a cluster whose API server is the test's
// (a real kube-apiserver with its RBAC authorizer), without VMs: what
// their system components may do is what RBAC the test writes lets their
// ServiceAccounts do.
type rightsWorld struct {
	// top is the test the world lives for: roles outlive a subtest.
	top      *testing.T
	cs       kubernetes.Interface
	ns       string
	endpoint string
	dirs     map[string]string
}

func newRightsWorld(t *testing.T, ctx context.Context, ns string) *rightsWorld {
	t.Helper()
	w := &rightsWorld{top: t, cs: kubernetes.NewForConfigOrDie(env.Config), ns: ns, endpoint: strings.TrimPrefix(env.Config.Host, "https://"), dirs: map[string]string{}}
	if _, err := w.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	for i, node := range []string{ns + "-a", ns + "-b"} {
		host, err := hn.HostAddress(fmt.Sprintf("10.47.0.%d", i+4))
		if err != nil {
			t.Fatal(err)
		}
		w.dirs[node] = t.TempDir()
		rt.AddComponentNode(env.Config, w.endpoint, node, host, netip.MustParsePrefix(fmt.Sprintf("192.168.%d.0/24", i+1)), w.dirs[node])
		t.Cleanup(func() { rt.RemoveComponentNode(node) })
	}
	return w
}

// role writes a ClusterRole bound to the ServiceAccount sa of the world's
// namespace (creating both the first time).
func (w *rightsWorld) role(t *testing.T, ctx context.Context, sa string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	name := w.ns + "-" + sa
	if _, err := w.cs.CoreV1().ServiceAccounts(w.ns).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		if _, err := w.cs.CoreV1().ServiceAccounts(w.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: w.ns}}}
		if _, err := w.cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.top.Cleanup(func() {
			_ = w.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = w.cs.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	cr, err := w.cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if _, err := w.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	cr.Rules = rules
	if _, err := w.cs.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pod creates a pod of one container on node: its token is bound to it.
func (w *rightsWorld) pod(t *testing.T, ctx context.Context, name, node, sa string, c corev1.Container) *corev1.Pod {
	t.Helper()
	p, err := w.cs.CoreV1().Pods(w.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, HostNetwork: true, Containers: []corev1.Container{c}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// felix runs calico-node (Felix) on node as ServiceAccount sa.
func (w *rightsWorld) felix(t *testing.T, ctx context.Context, name, node, sa string) *corev1.Pod {
	t.Helper()
	p := w.pod(t, ctx, name, node, sa, corev1.Container{Name: "calico-node", Image: "docker.io/calico/node:v3.30.7"})
	if err := rt.StartComponents(node, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.StopComponents(node, p) })
	return p
}

func (w *rightsWorld) log(node, service string) string {
	data, _ := os.ReadFile(filepath.Join(w.dirs[node], "root", vmdisk.LogPath(false, service)))
	return string(data)
}

var listWatch = []string{"get", "list", "watch"}

// felixRules are what Felix's syncer lists, as a role would grant them;
// without lists the API server has no CRDs for, which then answer 404
// (not installed) to a ServiceAccount that may list them.
func felixRules(without string) []rbacv1.PolicyRule {
	var calico []string
	for _, r := range []string{"clusterinformations", "felixconfigurations", "globalnetworkpolicies", "globalnetworksets", "ippools", "networkpolicies",
		"networksets", "hostendpoints", "bgpconfigurations", "bgppeers", "ipamblocks"} {
		if r != without {
			calico = append(calico, r)
		}
	}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes", "namespaces", "serviceaccounts", "pods", "services"}, Verbs: listWatch},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: listWatch},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: listWatch},
		{APIGroups: []string{"crd.projectcalico.org"}, Resources: calico, Verbs: listWatch},
	}
}

// TestComponentRightsInTheLocalWorld: a system component's RBAC rule
// removed, the local world shows what a real cluster shows.
//   - Felix (calico-node) cannot list a kind its syncer lists: it never
//     gets in sync, its readiness probe (calico-node -felix-ready) fails,
//     and its node programs no routes: another node's pods are out of
//     reach, in both directions. With the rule back, it syncs and routes.
//   - kube-proxy cannot list EndpointSlices: its proxier never
//     initializes, the node reaches no Service.
//   - the cloud node manager cannot list nodes: its node controller never
//     runs, the node keeps no provider ID and its uninitialized taint.
func TestComponentRightsInTheLocalWorld(t *testing.T) {
	ctx := context.Background()
	w := newRightsWorld(t, ctx, "rights")
	a, b := "rights-a", "rights-b"

	t.Run("Felix", func(t *testing.T) {
		w.role(t, ctx, "calico-node", felixRules("networksets")...)
		pa := w.felix(t, ctx, "calico-node-a", a, "calico-node")
		w.felix(t, ctx, "calico-node-b", b, "calico-node")
		// A pod of node b, serving.
		target := w.servePod(t, "192.168.2.10")
		ready := []string{"/bin/calico-node", "-felix-ready"}

		poll.Until(t, time.Minute, func() string {
			handled, ok, msg := rt.ExecProbe(a, pa, "calico-node", ready)
			if !handled || ok || !strings.Contains(msg, "networksets.crd.projectcalico.org") || !strings.Contains(msg, "forbidden") {
				return fmt.Sprintf("readiness probe: handled %v ok %v %q; want it failing on the refused list of networksets", handled, ok, msg)
			}
			return ""
		})
		if c, err := rt.DialFromNode(ctx, a, target); err == nil || !strings.Contains(err.Error(), "no route to host") {
			if c != nil {
				c.Close()
			}
			t.Errorf("node a reached a pod of node b while Felix is not in sync: %v", err)
		}
		poll.Until(t, 10*time.Second, func() string {
			if l := w.log(a, vmdisk.Containerd); !strings.Contains(l, `failed to list networksets.crd.projectcalico.org: networksets.crd.projectcalico.org is forbidden`) {
				return "node a's container log does not show Felix's refused list:\n" + l
			}
			return ""
		})

		// With the rule, Felix gets in sync (it retries every second),
		// the probe passes and the pod is reached.
		w.role(t, ctx, "calico-node", felixRules("")...)
		poll.Until(t, time.Minute, func() string {
			if _, ok, msg := rt.ExecProbe(a, pa, "calico-node", ready); !ok {
				return "readiness probe still failing: " + msg
			}
			c, err := rt.DialFromNode(ctx, a, target)
			if err != nil {
				return "node a does not reach node b's pod: " + err.Error()
			}
			c.Close()
			return ""
		})
	})

	t.Run("kube-proxy", func(t *testing.T) {
		rules := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: listWatch},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: listWatch},
		}
		w.role(t, ctx, "kube-proxy", rules...)
		p := w.pod(t, ctx, "kube-proxy-a", a, "kube-proxy", corev1.Container{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.36.3"})
		if err := rt.StartComponents(a, p, "kube-proxy"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.StopComponents(a, p) })
		svc, err := w.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		apiService := net.JoinHostPort(svc.Spec.ClusterIP, "443")
		poll.Until(t, time.Minute, func() string {
			c, err := rt.DialFromNode(ctx, a, apiService)
			if err == nil {
				c.Close()
				return "node a reaches the kubernetes Service while its kube-proxy may not list EndpointSlices"
			}
			if !strings.Contains(err.Error(), "nothing routes Service IPs") {
				return "waiting for the node's Service view: " + err.Error()
			}
			return ""
		})
		w.role(t, ctx, "kube-proxy", append(rules, rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: listWatch})...)
		// Its rules programmed, the node's connection goes to the
		// Service's endpoints (whether they answer is theirs to say).
		poll.Until(t, time.Minute, func() string {
			c, err := rt.DialFromNode(ctx, a, apiService)
			if err != nil && strings.Contains(err.Error(), "nothing routes Service IPs") {
				return "node a's kube-proxy still programs nothing: " + err.Error()
			}
			if c != nil {
				c.Close()
			}
			return ""
		})
	})

	t.Run("cloud-node-manager", func(t *testing.T) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: b},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: cloudprovider.UninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
		if _, err := w.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.cs.CoreV1().Nodes().Delete(context.Background(), b, metav1.DeleteOptions{}) })
		// Everything the chart grants but list and watch.
		w.role(t, ctx, "cloud-node-manager",
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "update", "patch"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}})
		p := w.pod(t, ctx, "cloud-node-manager-b", b, "cloud-node-manager",
			corev1.Container{Name: "cloud-node-manager", Image: "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager:v1.36.0"})
		if err := rt.StartComponents(b, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.StopComponents(b, p) })
		poll.Until(t, time.Minute, func() string {
			l := w.log(b, vmdisk.Kubelet)
			if !strings.Contains(l, "waiting for the node informer to sync: nodes: ") || !strings.Contains(l, `cannot list resource "nodes"`) {
				return "the node manager has not said why it waits:\n" + l
			}
			return ""
		})
		if got, _ := w.cs.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{}); got == nil || got.Spec.ProviderID != "" {
			t.Fatalf("node initialized by a node manager that may not list nodes: %+v", got)
		}
		w.role(t, ctx, "cloud-node-manager",
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}})
		poll.Until(t, 2*time.Minute, func() string {
			got, err := w.cs.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if got.Spec.ProviderID == "" || slices.ContainsFunc(got.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cloudprovider.UninitializedTaint }) {
				return fmt.Sprintf("node not initialized yet: providerID %q taints %v", got.Spec.ProviderID, got.Spec.Taints)
			}
			return ""
		})
	})

	// What a node's components read once in sync with their rights (the
	// roles above now grant everything): one list and one watch per
	// resource (a 404 list, a type not installed, no watch), and one
	// discovery request per kind listed only while served. Issue 51
	// measures the cost per node from these.
	t.Run("reads per node", func(t *testing.T) {
		felix := w.pod(t, ctx, "calico-node-reads", b, "calico-node", corev1.Container{Name: "calico-node", Image: "docker.io/calico/node:v3.30.7"})
		proxy := w.pod(t, ctx, "kube-proxy-reads", b, "kube-proxy", corev1.Container{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.36.3"})
		cnm := w.pod(t, ctx, "cloud-node-manager-reads", b, "cloud-node-manager",
			corev1.Container{Name: "cloud-node-manager", Image: "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager:v1.36.0"})
		for _, p := range []*corev1.Pod{felix, proxy, cnm} {
			if err := rt.StartComponents(b, p); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rt.StopComponents(b, p) })
		}
		// Felix: 17 kinds always listed (11 Calico CRDs, none installed
		// here: 404, no watch; 6 Kubernetes kinds and NetworkPolicies:
		// list and watch), 6 listed only while served (discovery);
		// kube-proxy 4 lists and watches; the node manager 1.
		const want = 11 + 7*2 + 6 + 4*2 + 1*2
		poll.Until(t, time.Minute, func() string {
			if _, ok, msg := rt.ExecProbe(b, felix, "calico-node", []string{"-felix-ready"}); !ok {
				return msg
			}
			if n := rt.ComponentReads(b); n < want {
				return fmt.Sprintf("%d requests so far, want %d", n, want)
			}
			return ""
		})
		if n := rt.ComponentReads(b); n != want {
			t.Errorf("the node's components sent %d requests to get in sync, want %d", n, want)
		}
		t.Logf("requests per node to get in sync: %d (Felix %d, kube-proxy %d, cloud-node-manager %d)", rt.ComponentReads(b), 11+7*2+6, 4*2, 2)
	})
}
