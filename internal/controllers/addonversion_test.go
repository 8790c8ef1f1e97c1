package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/apicallers"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/poll"
)

// TestAddonsFollowTheControlPlaneVersion: a cluster made by the windows
// flavor at v1.35.4 whose KubeadmControlPlane moves to v1.36.3 gets its
// kube-proxy-windows and cloud-provider-azure ConfigMaps re-rendered to
// v1.36.3's images once every control-plane machine runs it (as Cluster
// API moves the Linux kube-proxy), not while the rollout is under way;
// the CNI's ConfigMap and another cluster's stay as they were.
func TestAddonsFollowTheControlPlaneVersion(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	c := env.Client
	ns, _, cluster, kcp := appliedFlavorAt135(t, "addonversion-", "up")
	// Another cluster's ConfigMap of the same content, in a set that
	// selects it too: not this cluster's to move.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared-kube-proxy-windows", Namespace: ns.Name}}
	key := client.ObjectKey{Namespace: ns.Name, Name: "up-kube-proxy-windows"}
	mine := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, mine); err != nil {
		t.Fatal(err)
	}
	other.Data = mine.Data
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	set := &addonsv1.ClusterResourceSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "up-kube-proxy-windows"}, set); err != nil {
		t.Fatal(err)
	}
	set.Spec.Resources = append(set.Spec.Resources, addonsv1.ResourceRef{Kind: "ConfigMap", Name: other.Name})
	if err := c.Update(ctx, set); err != nil {
		t.Fatal(err)
	}
	setStatus := func(v string) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(kcp), kcp); err != nil {
			t.Fatal(err)
		}
		kcp.Status.Versions = []clusterv1.StatusVersion{{Version: v, Replicas: 1}}
		if err := c.Status().Update(ctx, kcp); err != nil {
			t.Fatal(err)
		}
	}
	setStatus("v1.35.4")
	cni := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "up-calico-windows"}, cni); err != nil {
		t.Fatal(err)
	}

	// The rollout starts: one machine of each version.
	if err := c.Get(ctx, client.ObjectKeyFromObject(kcp), kcp); err != nil {
		t.Fatal(err)
	}
	kcp.Spec.Version = "v1.36.3"
	if err := c.Update(ctx, kcp); err != nil {
		t.Fatal(err)
	}
	kcp.Status.Versions = []clusterv1.StatusVersion{{Version: "v1.35.4", Replicas: 1}, {Version: "v1.36.3", Replicas: 1}}
	if err := c.Status().Update(ctx, kcp); err != nil {
		t.Fatal(err)
	}
	// A reconcile while the rollout is under way leaves the old images.
	r := &controllers.AddonVersionReconciler{Client: c, Reader: c, Recorder: record.NewFakeRecorder(10)}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cluster)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, mine); err != nil {
		t.Fatal(err)
	}
	if doc := mine.Data["kube-proxy-windows.yaml"]; !strings.Contains(doc, "kube-proxy:v1.35.4-calico-hostprocess") {
		t.Fatalf("kube-proxy-windows moved before the control plane rolled out:\n%s", doc)
	}

	stop := startControllers(t, armCfg)
	defer stop()
	setStatus("v1.36.3")
	ccm, cnm, _ := flavors.CloudProviderAzureImages(36)
	poll.Until(t, 30*time.Second, func() string {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, key, cm); err != nil {
			return err.Error()
		}
		if doc := cm.Data["kube-proxy-windows.yaml"]; !strings.Contains(doc, "image: docker.io/sigwindowstools/kube-proxy:v1.36.3-calico-hostprocess") {
			return "kube-proxy-windows still runs: " + doc[strings.Index(doc, "image:"):][:80]
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "up-cloud-provider-azure"}, cm); err != nil {
			return err.Error()
		}
		doc := cm.Data["cloud-provider-azure.yaml"]
		if !strings.Contains(doc, "image: "+ccm) || !strings.Contains(doc, "image: "+cnm) || strings.Contains(doc, "v1.35.") {
			return "cloud-provider-azure is not at " + ccm + " and " + cnm
		}
		return ""
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(other.Data["kube-proxy-windows.yaml"], "v1.35.4-calico-hostprocess") {
		t.Error("another cluster's ConfigMap moved with this cluster")
	}
	after := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cni), after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != cni.ResourceVersion {
		t.Error("the CNI's ConfigMap, which no version binds, was rewritten")
	}
}

// TestSettledAddonsAreNotReadAgain: once a Cluster's add-ons are at its
// control plane's version, the reconciles that its own and its control
// plane's status patches bring (dozens per machine during a bring-up) read
// none of its ConfigMaps again; a new version still moves them.
func TestSettledAddonsAreNotReadAgain(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	ns, objs, cluster, kcp := appliedFlavorAt135(t, "addonreads-", "settled")
	rolledOut := func(v string) { t.Helper(); rollOut(t, kcp, v) }
	// The services endpoint the AzureCluster controller writes once the
	// cluster's endpoint is known: a set refers to it.
	endpoint := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: cluster.Name + infrav1.ServicesEndpointSuffix}}
	if err := c.Create(ctx, endpoint); err != nil {
		t.Fatal(err)
	}
	rolledOut("v1.35.4")
	reads := &configMapReads{Reader: c}
	r := &controllers.AddonVersionReconciler{Client: c, Reader: reads, Recorder: record.NewFakeRecorder(10)}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cluster)}); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	if reads.n == 0 {
		t.Fatal("the first reconcile read none of the add-ons' ConfigMaps: the test no longer sees what it counts")
	}
	first := reads.n
	for range 3 {
		reconcile()
	}
	if got := reads.n - first; got != 0 {
		t.Errorf("3 reconciles of a Cluster whose add-ons are at its version read ConfigMaps %d times, want none", got)
	}

	rolledOut("v1.36.3")
	reconcile()
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "settled-kube-proxy-windows"}, cm); err != nil {
		t.Fatal(err)
	}
	if doc := cm.Data["kube-proxy-windows.yaml"]; !strings.Contains(doc, "kube-proxy:v1.36.3-calico-hostprocess") {
		t.Errorf("kube-proxy-windows did not follow the control plane to v1.36.3")
	}

	// A set applied once the cluster has settled, its ConfigMap written
	// from the old version's template: neither the version nor the labels
	// change, and it is followed all the same.
	late := applyLateSet(t, ns.Name, cluster.Name, objs)
	reconcile()
	if err := c.Get(ctx, client.ObjectKeyFromObject(late), late); err != nil {
		t.Fatal(err)
	}
	if doc := late.Data["kube-proxy-windows.yaml"]; !strings.Contains(doc, "kube-proxy:v1.36.3-calico-hostprocess") {
		t.Errorf("a ClusterResourceSet applied after the cluster settled kept its kube-proxy-windows at v1.35.4")
	}
}

// rollOut moves kcp to version v with all its machines at it.
func rollOut(t *testing.T, kcp *controlplanev1.KubeadmControlPlane, v string) {
	t.Helper()
	ctx, c := context.Background(), env.Client
	if err := c.Get(ctx, client.ObjectKeyFromObject(kcp), kcp); err != nil {
		t.Fatal(err)
	}
	if kcp.Spec.Version != v {
		kcp.Spec.Version = v
		if err := c.Update(ctx, kcp); err != nil {
			t.Fatal(err)
		}
	}
	kcp.Status.Versions = []clusterv1.StatusVersion{{Version: v, Replicas: 1}}
	if err := c.Status().Update(ctx, kcp); err != nil {
		t.Fatal(err)
	}
}

// TestAddonVersionReadsFromTheCache: the controller, run by a manager,
// reads the ClusterResourceSets and the KubeadmControlPlane from the
// manager's cache, not from the API server at each wake (every status
// patch of a Cluster and of its control plane is one); and a set applied
// after the Cluster settled still wakes it, so that its ConfigMap follows
// the control plane's version.
func TestAddonVersionReadsFromTheCache(t *testing.T) {
	ctx, c := context.Background(), env.Client
	ns, objs, cluster, kcp := appliedFlavorAt135(t, "addoncache-", "cached")
	endpoint := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: cluster.Name + infrav1.ServicesEndpointSuffix}}
	if err := c.Create(ctx, endpoint); err != nil {
		t.Fatal(err)
	}
	rollOut(t, kcp, "v1.35.4")

	counter := apicallers.New()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(counter.Wrap)
	opts := managerOptions(t)
	opts.Logger = counter.Logger(ctrl.Log)
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&controllers.AddonVersionReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}).SetupWithManager(mgr,
		controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	stop := runManager(t, mgr)
	defer stop()

	movedTo := func(name, v string) func() string {
		return func() string {
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: name}, cm); err != nil {
				return err.Error()
			}
			if !strings.Contains(cm.Data["kube-proxy-windows.yaml"], "kube-proxy:"+v+"-calico-hostprocess") {
				return name + " is not at " + v
			}
			return ""
		}
	}
	rollOut(t, kcp, "v1.36.3")
	poll.Until(t, 60*time.Second, movedTo("cached-kube-proxy-windows", "v1.36.3"))
	liveReads := func() map[string]float64 {
		live := map[string]float64{}
		for k, n := range counter.Counts() {
			if k.Controller == "addonversion" && (k.Request == "GET kubeadmcontrolplanes" || k.Request == "LIST clusterresourcesets") {
				live[k.Request] += n
			}
		}
		return live
	}
	if live := liveReads(); len(live) != 0 {
		t.Errorf("the reconciles that moved the add-ons made live requests of the control plane and the sets: %v, want none (the manager caches both)", live)
	}

	// A set applied now, its ConfigMap from the old version's template:
	// nothing of the Cluster or its control plane changes.
	late := applyLateSet(t, ns.Name, cluster.Name, objs)
	poll.Until(t, 60*time.Second, movedTo(late.Name, "v1.36.3"))
	if live := liveReads(); len(live) != 0 {
		t.Errorf("the reconciles of the set applied later made live requests of the control plane and the sets: %v, want none", live)
	}
}

// applyLateSet creates, in namespace, a ClusterResourceSet selecting the
// cluster and its ConfigMap <cluster>-late-kube-proxy-windows, holding the
// flavor's kube-proxy-windows at v1.35.4 (objs, from appliedFlavorAt135):
// a set applied once the cluster has settled, from an older template.
func applyLateSet(t *testing.T, namespace, cluster string, objs []client.Object) *corev1.ConfigMap {
	t.Helper()
	var set *addonsv1.ClusterResourceSet
	var old135 map[string]string
	for _, o := range objs {
		switch x := o.(type) {
		case *addonsv1.ClusterResourceSet:
			set = x
		case *corev1.ConfigMap:
			if x.Name == cluster+"-kube-proxy-windows" {
				old135 = x.Data
			}
		}
	}
	if !strings.Contains(old135["kube-proxy-windows.yaml"], "kube-proxy:v1.35.4-calico-hostprocess") {
		t.Fatal("the flavor's kube-proxy-windows at v1.35.4 is not what the test expects")
	}
	late := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster + "-late-kube-proxy-windows"}, Data: old135}
	lateSet := &addonsv1.ClusterResourceSet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster + "-late"},
		Spec: addonsv1.ClusterResourceSetSpec{ClusterSelector: set.Spec.ClusterSelector, Resources: []addonsv1.ResourceRef{{Kind: "ConfigMap", Name: late.Name}}}}
	for _, o := range []client.Object{late, lateSet} {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return late
}

// configMapReads counts the ConfigMaps read through it from the API server.
type configMapReads struct {
	client.Reader
	n int
}

func (r *configMapReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		r.n++
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// windowsFlavorAt135 is the windows flavor's cluster at v1.35.4.
func windowsFlavorAt135(t *testing.T, namespace, name string) []client.Object {
	t.Helper()
	objs, err := flavors.Generate(flavors.Windows, flavors.Options{ClusterName: name, Namespace: namespace, KubernetesVersion: "v1.35.4",
		WindowsVersion: infrav1.WindowsServer2022, LinuxNodes: 1, WindowsNodes: 1, Location: "westeurope",
		SubscriptionID: "00000000-0000-0000-0000-000000000001", SSHPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh test"})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// appliedFlavorAt135 creates a namespace and in it the windows flavor's
// add-on sets and their ConfigMaps, the Cluster and its control plane at
// v1.35.4, as clusterctl would apply them (the Cluster paused: no Cluster
// API controller runs here).
func appliedFlavorAt135(t *testing.T, prefix, name string) (*corev1.Namespace, []client.Object, *clusterv1.Cluster, *controlplanev1.KubeadmControlPlane) {
	t.Helper()
	ctx, c := context.Background(), env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	ownNamespace(t, ns.Name)
	objs := windowsFlavorAt135(t, ns.Name, name)
	var cluster *clusterv1.Cluster
	var kcp *controlplanev1.KubeadmControlPlane
	for _, o := range objs {
		switch x := o.(type) {
		case *clusterv1.Cluster:
			cluster = x
		case *controlplanev1.KubeadmControlPlane:
			kcp = x
		case *corev1.ConfigMap, *addonsv1.ClusterResourceSet:
		default:
			continue
		}
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	return ns, objs, cluster, kcp
}
