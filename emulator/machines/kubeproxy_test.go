package machines_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winkube/winkube/internal/poll"
)

// TestServiceRulesOutliveKubeProxyPod: the node's kube-proxy pod is
// deleted and recreated (a DaemonSet's rolling update): the Service rules
// it programmed stay, so the node keeps reaching the kubernetes Service
// through the replacement, as iptables rules do on a real node.
func TestServiceRulesOutliveKubeProxyPod(t *testing.T) {
	ctx := context.Background()
	w := newRightsWorld(t, ctx, "kprules")
	a := "kprules-a"
	w.role(t, ctx, "kube-proxy",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: listWatch},
		rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: listWatch},
		rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: listWatch})
	svc, err := w.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiService := net.JoinHostPort(svc.Spec.ClusterIP, "443")
	// Through the node's rules the connection goes to the Service's
	// endpoint (whether that answers is its own to say); without them it
	// is lost, or the node has not seen the Service yet.
	routed := func() string {
		c, err := rt.DialFromNode(ctx, a, apiService)
		if c != nil {
			c.Close()
		}
		if err != nil && (strings.Contains(err.Error(), "nothing routes Service IPs") || strings.Contains(err.Error(), "no machine, pod or Service")) {
			return "node a does not route the kubernetes Service: " + err.Error()
		}
		return ""
	}
	start := func(name string) *corev1.Pod {
		p := w.pod(t, ctx, name, a, "kube-proxy", corev1.Container{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.36.3"})
		if err := rt.StartComponents(a, p, "kube-proxy"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.StopComponents(a, p) })
		return p
	}
	old := start("kube-proxy-old")
	poll.Until(t, time.Minute, routed)

	// The pod is deleted: no kube-proxy runs on the node.
	rt.StopComponents(a, old)
	rt.SetInstalled(a)
	for i := range 3 {
		if why := routed(); why != "" {
			t.Fatalf("connection %d while the node's kube-proxy pod is replaced: %s", i, why)
		}
	}
	start("kube-proxy-new")
	poll.Until(t, time.Minute, routed)
}
