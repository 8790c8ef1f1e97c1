package startneeds

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/internal/poll"
)

type countReviews struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countReviews) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// A grant is remembered and spares the next review; a denial is not, so
// RBAC added later counts at the next check.
func TestGrantsRememberOnlyGrants(t *testing.T) {
	env := apiServer.Env(t)
	ctx := context.Background()
	var reviews atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countReviews{rt, &reviews} })
	c := &Checker{Client: kubernetes.NewForConfigOrDie(cfg), Grants: &Grants{TTL: time.Hour}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "p"}, Spec: corev1.PodSpec{ServiceAccountName: "calico-node"}}
	perm := Permission{Verb: "get", Resource: "nodes"}
	check := func() string {
		t.Helper()
		missing, _, err := c.checkPermission(ctx, pod, perm)
		if err != nil {
			t.Fatal(err)
		}
		return missing
	}
	// Both checks run: the second must review again.
	if first, second := check(), check(); first == "" || second == "" {
		t.Fatal("a service account without RBAC may get nodes")
	}
	if n := reviews.Load(); n != 2 {
		t.Fatalf("%d reviews for two checks of a denied permission, want 2 (denials are not kept)", n)
	}
	admin := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "get-nodes"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "get-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "get-nodes"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kube-system", Name: "calico-node"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect as the API server's informers see it.
	poll.Until(t, time.Minute, func() string {
		if check() != "" {
			return "the granted permission is still denied"
		}
		return ""
	})
	n := reviews.Load()
	for range 3 {
		if check() != "" {
			t.Fatal("a granted permission was denied")
		}
	}
	if more := reviews.Load() - n; more != 0 {
		t.Fatalf("%d reviews for a permission granted a moment ago, want none", more)
	}
	// Another service account is another question.
	pod.Spec.ServiceAccountName = "other"
	if check() == "" {
		t.Fatal("a grant to calico-node served another service account")
	}
}
