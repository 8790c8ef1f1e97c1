package localworld

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
)

const namespace = "default"

// CreateCluster applies the flavor's objects; objects that already exist
// are left as they are, so a cluster is never created twice.
func (w *World) CreateCluster(ctx context.Context) error {
	o := w.opts
	key, err := sshKey(o.StateDir)
	if err != nil {
		return err
	}
	objs, err := flavors.Generate(o.Flavor, o.ClusterOptions(key))
	if err != nil {
		return err
	}
	groups := map[string]bool{}
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, w.Client.Scheme())
		if err != nil {
			return err
		}
		groups[gvk.Group] = true
	}
	if err := waitCreateWindow(ctx, w.Client, groups); err != nil {
		return err
	}
	if err := w.createIdentity(ctx); err != nil {
		return err
	}
	for _, obj := range objs {
		if ac, ok := obj.(*infrav1.AzureCluster); ok && o.ResourceGroup != "" {
			ac.Spec.ResourceGroup = o.ResourceGroup
		}
	}
	created := 0
	for _, obj := range objs {
		err := w.Client.Create(ctx, obj)
		switch {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			return fmt.Errorf("apply %T %s: %w", obj, obj.GetName(), err)
		default:
			created++
		}
	}
	if created == 0 {
		o.progress("cluster %s exists: resuming it", o.Name)
	} else {
		o.progress("cluster %s: applied %d objects of flavor %s", o.Name, created, o.Flavor)
	}
	return nil
}

// ClusterOptions are the flavor options of the world's cluster, with the
// SSH key of user capi. Calico's Typha runs as many replicas as the tigera
// operator, which CAPZ installs Calico with, would scale it to for the
// world's nodes, so a world measures what a CAPZ cluster of its size runs.
func (o Options) ClusterOptions(sshPublicKey string) flavors.Options {
	linux := int(o.ControlPlaneNodes + o.LinuxNodes)
	return flavors.Options{
		ClusterName: o.Name, Namespace: namespace, KubernetesVersion: o.KubernetesVersion, WindowsVersion: o.WindowsVersion,
		ControlPlaneNodes: o.ControlPlaneNodes, LinuxNodes: o.LinuxNodes, WindowsNodes: o.WindowsNodes,
		Location: "westeurope", SubscriptionID: Subscription, SSHPublicKey: sshPublicKey, IdentityName: identityName(o.Name),
		MetricsServer: o.MetricsServer, AzureDiskCSI: o.AzureDiskCSI,
		CalicoTyphaReplicas: int32(flavors.TyphaReplicas(linux+int(o.WindowsNodes), linux)),
	}
}

// Status is the cluster's state as the progress display shows it.
type Status struct {
	Machines   []string // "name: phase"
	NodesReady int
	NodesWant  int
	AddonsDone bool
	Detail     string
	// NotReady are the registered nodes that are not Ready.
	NotReady []string
}

func (s Status) String() string {
	add := "add-ons pending"
	if s.AddonsDone {
		add = "add-ons running"
	}
	line := fmt.Sprintf("nodes Ready %d/%d, %s", s.NodesReady, s.NodesWant, add)
	if s.Detail != "" {
		line += " (" + s.Detail + ")"
	}
	return line
}

// Done says whether every node is Ready and the add-ons run.
func (s Status) Done() bool { return s.NodesWant > 0 && s.NodesReady >= s.NodesWant && s.AddonsDone }

// Workload is the workload cluster's admin configuration, once Cluster API
// has written its kubeconfig. It is asked every second or two (the
// progress, the workload admission), so it reads the Secret from the
// controllers' cache, which holds the clusters' Secrets (Cluster API labels
// the kubeconfig with its cluster, util/kubeconfig, cluster-api v1.14.2)
// and is kept by their watch: a GET from the API server each time was the
// management plane's most frequent read of a Secret.
func (w *World) Workload(ctx context.Context) (*rest.Config, []byte, error) {
	s := &corev1.Secret{}
	var r client.Reader = w.Client
	if w.cache != nil {
		r = w.cache
	}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: w.opts.Name + "-kubeconfig"}, s); err != nil {
		return nil, nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
	return cfg, s.Data["value"], err
}

// Status reads where the cluster is.
func (w *World) Status(ctx context.Context) (Status, error) {
	o := w.opts
	st := Status{NodesWant: int(o.ControlPlaneNodes + o.LinuxNodes + o.WindowsNodes)}
	ms := &clusterv1.MachineList{}
	// From the controllers' cache: asked every second, a list from the API
	// server would decode every Machine each time. Only read here, so not
	// copied out of the cache either: copies of 500 Machines a second were
	// 1.8 % of winkube's CPU at 1+100+400.
	var r client.Reader = w.Client
	if w.cache != nil {
		r = w.cache
	}
	if err := r.List(ctx, ms, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: o.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return st, err
	}
	for _, m := range ms.Items {
		if m.Status.Phase != "" {
			st.Machines = append(st.Machines, m.Name+": "+m.Status.Phase)
		}
	}
	sort.Strings(st.Machines)
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		st.Detail = "waiting for the control plane"
		return st, nil
	}
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return st, err
	}
	nodes, err := w.nodes.list(ctx, cfg.Host, cs)
	if err != nil {
		st.Detail = "workload API server not answering yet"
		return st, nil
	}
	for _, n := range nodes {
		if util.IsNodeReady(n) {
			st.NodesReady++
		} else {
			st.NotReady = append(st.NotReady, n.Name)
		}
	}
	dss, err := cs.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return st, nil
	}
	applied, err := w.addonsApplied(ctx, r)
	if err != nil {
		return st, nil
	}
	st.AddonsDone = applied && len(dss.Items) > 1 && allReady(dss.Items)
	if len(st.NotReady) > 0 {
		st.Detail = "not Ready: " + strings.Join(st.NotReady, ", ")
	}
	return st, nil
}

// nodeWatch keeps the workload cluster's nodes from one watch: following
// a cluster of a thousand nodes lists them once, not every second.
type nodeWatch struct {
	mu     sync.Mutex
	host   string
	stop   chan struct{}
	lister listersv1.NodeLister
	synced cache.InformerSynced
}

// list is the nodes from the watch once it has synced; until then (and
// for another API server) it lists them.
func (nw *nodeWatch) list(ctx context.Context, host string, cs kubernetes.Interface) ([]*corev1.Node, error) {
	nw.mu.Lock()
	if nw.host != host {
		nw.closeLocked()
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(crcache.TransformStripManagedFields()))
		inf := factory.Core().V1().Nodes()
		nw.host, nw.stop, nw.lister, nw.synced = host, make(chan struct{}), inf.Lister(), inf.Informer().HasSynced
		factory.Start(nw.stop)
	}
	lister, synced := nw.lister, nw.synced
	nw.mu.Unlock()
	if synced() {
		return lister.List(labels.Everything())
	}
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Node, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

func (nw *nodeWatch) close() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.closeLocked()
}

func (nw *nodeWatch) closeLocked() {
	if nw.stop != nil {
		close(nw.stop)
		nw.stop, nw.host = nil, ""
	}
}

// addonsApplied says whether Cluster API has applied every resource of
// every ClusterResourceSet that selects the cluster. Before it has, the
// DaemonSets in kube-system are kubeadm's kube-proxy and whichever sets
// came first, all of them Ready: the progress said "add-ons running" and
// then "pending" again when Calico's arrived.
func (w *World) addonsApplied(ctx context.Context, r client.Reader) (bool, error) {
	cluster := &clusterv1.Cluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: w.opts.Name}, cluster); err != nil {
		return false, err
	}
	sets := &addonsv1.ClusterResourceSetList{}
	if err := r.List(ctx, sets, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	// Cluster API names a cluster's binding after the cluster
	// (getOrCreateClusterResourceSetBinding in
	// core/reconcilers/clusterresourceset/clusterresourceset_helpers.go,
	// cluster-api v1.14.2).
	binding := &addonsv1.ClusterResourceSetBinding{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: w.opts.Name}, binding); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return resourceSetsApplied(cluster.Labels, sets.Items, binding), nil
}

// resourceSetsApplied says whether binding records each resource of each
// of sets that selects a cluster with clusterLabels as applied. Cluster API
// records a resource only once it has tried it, with applied false when it
// failed (clusterresourceset_controller.go, cluster-api v1.14.2), and an
// empty selector selects no cluster.
func resourceSetsApplied(clusterLabels map[string]string, sets []addonsv1.ClusterResourceSet, binding *addonsv1.ClusterResourceSetBinding) bool {
	for i := range sets {
		crs := &sets[i]
		if !crs.DeletionTimestamp.IsZero() {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&crs.Spec.ClusterSelector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(clusterLabels)) {
			continue
		}
		var got *addonsv1.ResourceSetBinding
		for j := range binding.Spec.Bindings {
			if binding.Spec.Bindings[j].ClusterResourceSetName == crs.Name {
				got = &binding.Spec.Bindings[j]
			}
		}
		if got == nil {
			return false
		}
		for _, ref := range crs.Spec.Resources {
			if !got.IsApplied(ref) {
				return false
			}
		}
	}
	return true
}

func allReady(dss []appsv1.DaemonSet) bool {
	for _, d := range dss {
		if d.Status.DesiredNumberScheduled == 0 && d.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] == "windows" {
			continue
		}
		if d.Status.NumberReady < d.Status.DesiredNumberScheduled || d.Status.DesiredNumberScheduled == 0 {
			return false
		}
	}
	return true
}

// WaitReady reports progress until every node is Ready and the add-ons
// run, or ctx ends.
func (w *World) WaitReady(ctx context.Context) error {
	last := ""
	lastMachines := map[string]bool{}
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		st, err := w.Status(ctx)
		if err != nil {
			return false, nil
		}
		for _, m := range st.Machines {
			if !lastMachines[m] {
				w.opts.progress("machine %s", m)
			}
		}
		lastMachines = map[string]bool{}
		for _, m := range st.Machines {
			lastMachines[m] = true
		}
		if line := st.String(); line != last {
			w.opts.progress("%s", line)
			last = line
		}
		return st.Done(), nil
	})
	if err != nil {
		return fmt.Errorf("cluster %s not ready: %s: %w", w.opts.Name, last, err)
	}
	return nil
}

// WriteKubeconfigs writes the management and the workload kubeconfig into
// the state directory and returns their paths.
func (w *World) WriteKubeconfigs(ctx context.Context) (mgmt, workload string, err error) {
	mgmt = filepath.Join(w.opts.StateDir, ManagementKubeconfig)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["winkube-management"] = &clientcmdapi.Cluster{Server: w.Config.Host, CertificateAuthorityData: w.Config.CAData}
	cfg.AuthInfos["winkube-management"] = &clientcmdapi.AuthInfo{ClientCertificateData: w.Config.CertData, ClientKeyData: w.Config.KeyData, Token: w.Config.BearerToken}
	cfg.Contexts["winkube-management"] = &clientcmdapi.Context{Cluster: "winkube-management", AuthInfo: "winkube-management"}
	cfg.CurrentContext = "winkube-management"
	if err := clientcmd.WriteToFile(*cfg, mgmt); err != nil {
		return "", "", err
	}
	_, raw, err := w.Workload(ctx)
	if err != nil {
		return mgmt, "", err
	}
	workload = filepath.Join(w.opts.StateDir, w.opts.Name+".kubeconfig")
	return mgmt, workload, os.WriteFile(workload, raw, 0o600)
}

// DeleteCluster deletes the Cluster through Cluster API and waits until
// its machines and Azure resources are gone.
func (w *World) DeleteCluster(ctx context.Context) error {
	c := &clusterv1.Cluster{}
	err := w.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: w.opts.Name}, c)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	w.opts.progress("deleting cluster %s through Cluster API", w.opts.Name)
	if err := w.Client.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	last := ""
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if apierrors.IsNotFound(w.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: w.opts.Name}, c)) {
			return true, nil
		}
		ms := &clusterv1.MachineList{}
		_ = w.Client.List(ctx, ms, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: w.opts.Name})
		if line := fmt.Sprintf("deleting: %d machines left", len(ms.Items)); line != last {
			w.opts.progress("%s", line)
			last = line
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("cluster %s not deleted: %s: %w", w.opts.Name, last, err)
	}
	w.opts.progress("cluster %s deleted", w.opts.Name)
	return nil
}
