package machines_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// controlPlaneMachine is a control-plane machine's own API server
// address: a TCP proxy to the test's API server, which goes (listener and
// connections) when the machine does.
type controlPlaneMachine struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startControlPlaneMachine(t *testing.T, apiServer string) *controlPlaneMachine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &controlPlaneMachine{ln: ln}
	t.Cleanup(m.remove)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", apiServer)
			if err != nil {
				_ = c.Close()
				continue
			}
			m.mu.Lock()
			m.conns = append(m.conns, c, up)
			m.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return m
}

func (m *controlPlaneMachine) remove() {
	_ = m.ln.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.conns {
		_ = c.Close()
	}
	m.conns = nil
}

// TestPodCredentialsOutliveTheControlPlaneMachine: the runtime holds a
// cluster's credentials from one control-plane machine (its local API
// server address), and Cluster API replaces that machine in an upgrade.
// A calico-node that started before must still give its node's CNI plugin
// a token afterwards: its process reaches the API server through the
// cluster's endpoint, not the machine that is gone. (The upgrade
// rehearsal's drain hung on exactly this: the new control plane's
// calico-node had started while the old machine was the runtime's, and
// the pods evicted onto that node never got a sandbox.)
func TestPodCredentialsOutliveTheControlPlaneMachine(t *testing.T) {
	ctx := context.Background()
	const ns, node = "cp-replaced", "cp-replaced-a"
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	for _, sa := range []string{"calico-node", "calico-cni-plugin"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// calico-node's right to mint the CNI plugin's token (the calico-node
	// ClusterRole's serviceaccounts/token rule, here as a Role).
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "calico-node"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"calico-cni-plugin"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "calico-node"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "calico-node"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "calico-node", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	endpoint := strings.TrimPrefix(env.Config.Host, "https://") // the cluster's load balancer
	first := startControlPlaneMachine(t, endpoint)
	viaFirst := rest.CopyConfig(env.Config)
	viaFirst.Host = "https://" + first.ln.Addr().String()
	host, err := hn.HostAddress("10.47.0.9")
	if err != nil {
		t.Fatal(err)
	}
	rt.AddComponentNode(viaFirst, endpoint, node, host, netip.MustParsePrefix("192.168.9.0/24"), t.TempDir())
	t.Cleanup(func() { rt.RemoveComponentNode(node) })
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "calico-node"},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "calico-node", HostNetwork: true,
			Containers: []corev1.Container{{Name: "calico-node", Image: "docker.io/calico/node:v3.30.7"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartComponents(node, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.StopComponents(node, pod) })

	first.remove() // Cluster API deleted the first control-plane machine

	cfg, err := rt.CNIPluginConfig(ctx, node)
	if err != nil {
		t.Fatalf("calico-node could not give the CNI plugin a token once the control-plane machine it started under was gone: %v", err)
	}
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the CNI plugin does not reach the API server with its token: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":calico-cni-plugin"; review.Status.UserInfo.Username != want {
		t.Errorf("the CNI plugin acts as %q, want %q", review.Status.UserInfo.Username, want)
	}
}
