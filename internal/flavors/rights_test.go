package flavors_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// podToken is the API server as the pod's ServiceAccount reaches it: a
// TokenRequest bound to the pod, as the kubelet projects it.
func podToken(t *testing.T, ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) *rest.Config {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// denied waits until the API server's authorizer refuses the pod's
// ServiceAccount to list the resource (an RBAC change reaches it a
// moment after it is written).
func denied(t *testing.T, ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, group, resource string) {
	t.Helper()
	user := "system:serviceaccount:" + pod.Namespace + ":" + pod.Spec.ServiceAccountName
	poll.Until(t, 30*time.Second, func() string {
		r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + pod.Namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: group, Resource: resource},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err.Error()
		}
		if r.Status.Allowed {
			return user + " may still list " + resource
		}
		return ""
	})
}

// tierCRD is Calico's Tier kind as a CRD, stood up by the test: the
// rendered add-ons may not install it yet.
func tierCRD() *apiextensionsv1.CustomResourceDefinition {
	return testenv.SchemalessCRD("crd.projectcalico.org", "Tier", "tiers", apiextensionsv1.ClusterScoped)
}

// TestComponentsListWithTheirOwnRights runs, for each system component of
// the rendered add-ons (applied to a real API server with its RBAC
// authorizer), what the upstream component lists and watches, with a
// token of its pod's ServiceAccount: with the add-ons' RBAC every one
// gets in sync; with one of its rules removed it does not, and says which
// list the API server refused. What the local world then does (Felix not
// Ready and no routes, kube-proxy programming nothing, the node left
// uninitialized) is emulator/machines' TestComponentRightsInTheLocalWorld.
func TestComponentsListWithTheirOwnRights(t *testing.T) {
	// It mostly waits (its wall time is about three times its CPU time).
	// Its only parallel neighbour never reaches the API server, so the
	// RBAC it removes and restores is seen by this test alone;
	// TestAddonsMeetWhatTheirComponentsNeed, which applies the same
	// add-ons, stays serial and is done before it resumes.
	t.Parallel()
	ctx := context.Background()
	o := opts("v1.36.3", "2022")
	objs, err := flavors.Generate(flavors.Windows, o)
	if err != nil {
		t.Fatal(err)
	}
	addons := addonObjects(t, objs)
	applyAddons(t, ctx, addons)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	pods := workloadPods(t, addons)
	// kubeadm's kube-proxy DaemonSet, whose kubeconfig names its pod's
	// ServiceAccount token.
	pods["kube-proxy"] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Spec: corev1.PodSpec{ServiceAccountName: "kube-proxy", HostNetwork: true,
			Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.36.3", Command: []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf"}}}}}
	checker := startneeds.New(admin)

	// session runs the workload's component as its pod: the pod exists
	// in the API (its token is bound to it).
	session := func(t *testing.T, workload string) (*startneeds.Session, *corev1.Pod, *startneeds.Component) {
		t.Helper()
		base, ok := pods[workload]
		if !ok {
			t.Fatalf("no add-on workload %s", workload)
		}
		var comp *startneeds.Component
		for _, c := range append(append([]corev1.Container(nil), base.Spec.InitContainers...), base.Spec.Containers...) {
			if f := checker.Find(osOf(base), c); f != nil && len(f.Watches) > 0 {
				comp = f
			}
		}
		if comp == nil {
			t.Fatalf("workload %s runs no component that lists anything", workload)
		}
		p := base.DeepCopy()
		p.Name, p.GenerateName, p.UID, p.Spec.NodeName = "", workload+"-", "", "node-1"
		p, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		s, err := startneeds.StartSession(startneeds.SessionConfig{Config: podToken(t, ctx, admin, p), Node: "node-1", Watches: comp.Watches, Sync: comp.Sync})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s, p, comp
	}

	cases := []struct {
		name, workload, component string
		// change is the RBAC change; group and resource the list it
		// refuses.
		change          apiChange
		group, resource string
	}{
		{name: "Felix may not list NetworkSets", workload: "calico-node", component: "calico-node", change: dropRule("calico-node", "networksets"), group: "crd.projectcalico.org", resource: "networksets"},
		{name: "Felix on Windows may not list HostEndpoints", workload: "calico-node-windows", component: "calico-node-windows", change: dropRule("calico-node", "hostendpoints"), group: "crd.projectcalico.org", resource: "hostendpoints"},
		// Issue 47's first finding: once Calico's Tier CRD is installed,
		// a calico-node role without tiers leaves Felix out of sync.
		{name: "Felix with the Tier CRD but no rule for tiers", workload: "calico-node", component: "calico-node", change: withTierCRD(dropRule("calico-node", "tiers")), group: "crd.projectcalico.org", resource: "tiers"},
		{name: "kube-controllers may not list pods", workload: "calico-kube-controllers", component: "calico-kube-controllers", change: dropRule("calico-kube-controllers", "pods"), resource: "pods"},
		{name: "kube-proxy may not list EndpointSlices", workload: "kube-proxy", component: "kube-proxy", change: dropRule("system:node-proxier", "endpointslices"), group: "discovery.k8s.io", resource: "endpointslices"},
		{name: "kube-proxy for Windows may not list Services", workload: "kube-proxy-windows", component: "kube-proxy (Windows)", change: dropRule("system:node-proxier", "services"), resource: "services"},
		{name: "cloud-node-manager may not list nodes", workload: "cloud-node-manager", component: "cloud-node-manager", change: dropRule("cloud-node-manager", "nodes"), resource: "nodes"},
		{name: "cloud-node-manager for Windows may not list nodes", workload: "cloud-node-manager-windows", component: "cloud-node-manager (Windows)", change: dropRule("cloud-node-manager", "nodes"), resource: "nodes"},
		{name: "cloud-controller-manager may not list Services", workload: "cloud-controller-manager", component: "cloud-controller-manager", change: dropRule("cloud-controller-manager", "services"), resource: "services"},
	}

	// With the add-ons' RBAC, every component gets in sync. The sessions
	// start together and are waited for afterwards: each takes its own
	// time to sync (its lists, its client's rate limit, its retries while
	// the API server catches up with the add-ons just applied), and
	// waiting for one before starting the next added those times up.
	type started struct {
		s    *startneeds.Session
		comp *startneeds.Component
	}
	var all []started
	for _, tc := range cases {
		s, _, comp := session(t, tc.workload)
		if comp.Name != tc.component {
			t.Fatalf("workload %s runs %s, want %s", tc.workload, comp.Name, tc.component)
		}
		all = append(all, started{s, comp})
	}
	for _, st := range all {
		s, comp := st.s, st.comp
		poll.Until(t, time.Minute, func() string {
			if ns := s.NotSynced(); ns != "" {
				return fmt.Sprintf("%s with the add-ons' RBAC: not in sync: %s", comp.Name, ns)
			}
			return ""
		})
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			restore := tc.change(t, ctx)
			defer restore()
			denied(t, ctx, admin, pods[tc.workload].DeepCopy(), tc.group, tc.resource)
			s, _, _ := session(t, tc.workload)
			want := tc.resource
			if tc.group != "" {
				want += "." + tc.group
			}
			poll.Until(t, time.Minute, func() string {
				ns := s.NotSynced()
				if !strings.Contains(ns, want+": ") || !strings.Contains(ns, "forbidden") {
					return fmt.Sprintf("%s: not in sync %q, want the list of %s refused", tc.component, ns, want)
				}
				return ""
			})
			if s.Synced() {
				t.Errorf("%s is in sync without the rule for %s", tc.component, want)
			}
		})
	}
}

// withTierCRD installs Calico's Tier CRD (if the add-ons do not) for the
// change, and removes it afterwards if it installed it.
func withTierCRD(change apiChange) apiChange {
	return func(t *testing.T, ctx context.Context) func() {
		crd := tierCRD()
		created := true
		if err := env.Client.Create(ctx, crd); apierrors.IsAlreadyExists(err) {
			created = false
		} else if err != nil {
			t.Fatal(err)
		}
		waitServed(t, ctx, "tier")
		restore := change(t, ctx)
		return func() {
			restore()
			if created {
				u := &unstructured.Unstructured{}
				u.SetAPIVersion("apiextensions.k8s.io/v1")
				u.SetKind("CustomResourceDefinition")
				u.SetName(crd.Name)
				if err := env.Client.Delete(ctx, u); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestCNIPluginActsWithItsOwnRights runs Calico's CNI plugin's ADD and
// DEL for a pod against the rendered add-ons, with the credentials
// calico-node's install-cni writes for it (a token of the
// calico-cni-plugin ServiceAccount, requested with calico-node's own):
// with the add-ons' RBAC the pod gets its address annotations and an
// IPAM handle, and DEL releases them; with a rule of the
// calico-cni-plugin role removed, the API server refuses the plugin and
// the pod gets no address, as on a node.
func TestCNIPluginActsWithItsOwnRights(t *testing.T) {
	ctx := context.Background()
	objs, err := flavors.Generate(flavors.Windows, opts("v1.36.3", "2022"))
	if err != nil {
		t.Fatal(err)
	}
	addons := addonObjects(t, objs)
	applyAddons(t, ctx, addons)
	waitServed(t, ctx, "ipamhandle")
	admin := kubernetes.NewForConfigOrDie(env.Config)
	node := workloadPods(t, addons)["calico-node"].DeepCopy()
	node.Name, node.GenerateName, node.Spec.NodeName = "", "calico-node-", "cni-node"
	node, err = admin.CoreV1().Pods(node.Namespace).Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(node.Namespace).Delete(ctx, node.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	nodeCfg := podToken(t, ctx, admin, node)
	// calico-node's startup, with its own token.
	if err := startneeds.EnsureClusterInformation(ctx, nodeCfg, "v3.30.7"); err != nil {
		t.Fatalf("calico-node cannot write ClusterInformation with the add-ons' RBAC: %v", err)
	}
	cni, err := startneeds.CalicoCNIConfig(ctx, nodeCfg, node.Namespace)
	if err != nil {
		t.Fatalf("calico-node cannot get the CNI plugin's token with the add-ons' RBAC: %v", err)
	}
	dc := dynamic.NewForConfigOrDie(env.Config)
	handles := dc.Resource(schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "ipamhandles"})
	ip := netip.MustParseAddr("192.168.7.9")

	workload := func(t *testing.T, name string) *corev1.Pod {
		t.Helper()
		p, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: "cni-node", Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10.2"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		return p
	}
	podIP := func(name string) string {
		p, err := admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Annotations["cni.projectcalico.org/podIP"]
	}

	t.Run("with the add-ons' RBAC", func(t *testing.T) {
		p := workload(t, "cni-allowed")
		if err := startneeds.CalicoCNIAdd(ctx, cni, "cni-node", p, "c0ffee", ip); err != nil {
			t.Fatalf("ADD with the calico-cni-plugin role: %v", err)
		}
		if got := podIP(p.Name); got != ip.String()+"/32" {
			t.Errorf("pod's Calico address annotation %q, want %s/32", got, ip)
		}
		if _, err := handles.Get(ctx, "k8s-pod-network.c0ffee", metav1.GetOptions{}); err != nil {
			t.Errorf("the IPAM handle of the pod's sandbox: %v", err)
		}
		if err := startneeds.CalicoCNIDel(ctx, cni, "default", p.Name, "c0ffee"); err != nil {
			t.Fatalf("DEL with the calico-cni-plugin role: %v", err)
		}
		if _, err := handles.Get(ctx, "k8s-pod-network.c0ffee", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the IPAM handle after DEL: %v, want it gone", err)
		}
		if got := podIP(p.Name); got != "" {
			t.Errorf("pod's Calico address annotation after DEL %q, want it emptied", got)
		}
	})

	for _, tc := range []struct{ name, resource, refused string }{
		// The endpoint is the pod's annotations, written through
		// pods/status.
		{name: "the plugin may not patch pods/status", resource: "pods/status", refused: `cannot patch resource "pods/status"`},
		// One rule grants every IPAM kind (and ClusterInformation).
		{name: "the plugin may not touch IPAM", resource: "ipamhandles", refused: `clusterinformations.crd.projectcalico.org "default" is forbidden`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore := dropRule("calico-cni-plugin", tc.resource)(t, ctx)
			defer restore()
			p := workload(t, "cni-"+strings.ReplaceAll(strings.Split(tc.resource, "/")[0], "ipam", "ipam-"))
			poll.Until(t, 30*time.Second, func() string {
				err := startneeds.CalicoCNIAdd(ctx, cni, "cni-node", p, "d00d", ip)
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					return fmt.Sprintf("ADD without the rule for %s: %v, want %q", tc.resource, err, tc.refused)
				}
				return ""
			})
			if got := podIP(p.Name); got != "" {
				t.Errorf("the pod got Calico address %q without the rule for %s", got, tc.resource)
			}
			if _, err := handles.Get(ctx, "k8s-pod-network.d00d", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("an IPAM handle left by a failed ADD: %v", err)
			}
		})
	}
}
