package nodejoin

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/testenv"
)

// One real API server for the package, with bootstrap-token
// authentication on as kubeadm turns it on, so that the tokens Run makes
// are tried for real.
var env *testenv.Env

func TestMain(m *testing.M) {
	// Evictions here finish within the request: a second between looks
	// would only be waited out.
	drainInterval = 20 * time.Millisecond
	os.Exit(testenv.Main(m, testenv.Options{
		CRDs:           []*apiextensionsv1.CustomResourceDefinition{calicoCRD("IPAMConfig", "ipamconfigs"), calicoCRD("FelixConfiguration", "felixconfigurations")},
		APIServerFlags: map[string]string{"enable-bootstrap-token-auth": "true"},
	}, func(e *testenv.Env) { env = e }))
}

// calicoCRD defines one of Calico's cluster-scoped kinds, schema-less.
func calicoCRD(kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	return testenv.SchemalessCRD("crd.projectcalico.org", kind, plural, apiextensionsv1.ClusterScoped)
}

// kubeadmCluster makes envtest's cluster look as `kubeadm init` and a
// Windows-ready Calico leave it: cluster-info, the bootstrap bindings,
// calico-node and its Windows DaemonSet, IPAM with strictAffinity, and
// kube-proxy-windows at the API server's version. It returns the objects
// to delete.
func kubeadmCluster(t *testing.T, version string) []client.Object {
	t.Helper()
	ctx := context.Background()
	kc := clientcmdapi.NewConfig()
	kc.Clusters[""] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	raw, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	ds := func(ns, name, image string, windows bool) *appsv1.DaemonSet {
		sel := map[string]string{"app": name}
		pod := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}
		if windows {
			pod.NodeSelector = map[string]string{corev1.LabelOSStable: "windows"}
		}
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: pod}}}
	}
	binding := func(name, role string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: NodeTokenGroup}}}
	}
	ipam := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMConfig",
		"metadata": map[string]any{"name": "default"}, "spec": map[string]any{"strictAffinity": true}}}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "cluster-info"}, Data: map[string]string{"kubeconfig": string(raw)}},
		binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper"),
		binding("kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient"),
		ds(metav1.NamespaceSystem, "calico-node", "quay.io/calico/node:v3.30.7", false),
		ds(metav1.NamespaceSystem, "calico-node-windows", "quay.io/calico/node-windows:v3.30.7", true),
		ds(metav1.NamespaceSystem, "kube-proxy-windows", "sigwindowstools/kube-proxy:"+version+"-calico-hostprocess", true),
		ipam,
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objs {
			if err := client.IgnoreNotFound(env.Client.Delete(ctx, o)); err != nil {
				t.Errorf("deleting %s: %v", o.GetName(), err)
			}
		}
	})
	return objs
}

func serverVersion(t *testing.T) string {
	t.Helper()
	cs := clientset(t)
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return kubeProxyTag(v.GitVersion)
}

func mustFind(t *testing.T, fs []Finding, check, substr string) {
	t.Helper()
	for _, f := range fs {
		if f.Check == check && strings.Contains(f.Problem, substr) {
			return
		}
	}
	t.Fatalf("no %s finding about %q in %v", check, substr, fmt.Sprint(fs))
}
