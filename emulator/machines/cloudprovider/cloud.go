// Package cloudprovider does for a workload cluster what Azure's cloud provider
// (cloud-provider-azure) does, and only while its processes would run:
// InitializeNode is what azure-cloud-node-manager does on its node from the
// instance metadata (provider ID, addresses, the region, zone and
// instance-type labels, then the uninitialized taint removed); the
// Controller is azure-cloud-controller-manager's service and node lifecycle
// controllers, active only while a cloud-controller-manager pod runs Ready
// in kube-system (the simulated kubelet has checked its cloud config): it
// programs Azure's load balancer for LoadBalancer Services as
// cloud-provider-azure does (servicelb.go), reading the pod's flags and the
// cloud config on its node, and deletes the Nodes whose VM is gone, finding
// VMs by the nodes' provider IDs. Without those pods nodes stay tainted and
// Services pending, as on Azure.
package cloudprovider

import (
	"context"
	"reflect"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
)

// UninitializedTaint is the taint a kubelet with an external cloud
// provider registers with, until the cloud controller initializes it.
const UninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// lbFinalizer keeps a Service until its load balancer IP is released.
const lbFinalizer = "service.kubernetes.io/load-balancer-cleanup"

// Instances answers what the cloud knows of a VM, by provider ID.
type Instances interface {
	// Exists says whether the VM of an azure:// provider ID exists.
	Exists(ctx context.Context, providerID string) (bool, error)
}

// Config is one workload cluster's cloud controller.
type Config struct {
	Client kubernetes.Interface
	// Images are the cloud-controller-manager's image repositories: a
	// Running and Ready pod of one of them in kube-system makes the
	// controller active.
	Images func(image string) bool
	// Synced, when set, says whether a cloud-controller-manager pod's own
	// informers (its Services and Nodes, listed with its ServiceAccount's
	// token) have synced: until then its controllers do nothing, as
	// cloud-provider's controllers wait for their caches. Tell the
	// controller with Resync when it changes.
	Synced func(pod *corev1.Pod) bool
	// Instances may be nil: Nodes are then never deleted.
	Instances Instances
	// Connect gives Azure's network, where the service controller
	// programs load balancers, reached with the credential the cloud
	// config names (Credentials). It may be nil: LoadBalancer Services
	// then stay pending, with an event saying why.
	Connect func(Credentials) (Network, error)
	// IMDS gives the base URL of the Instance Metadata Service of the VM
	// a node runs on: where a managed identity's token comes from. Nil or
	// "" when the node's VM has none (no Entra ID in this world).
	IMDS func(node string) string
	// ReadNodeFile reads a file on a node's disk: the cloud config the
	// cloud-controller-manager reads on the node it runs on.
	ReadNodeFile func(node, path string) ([]byte, error)
	// PrivateIP maps a node's InternalIP to its address in the virtual
	// network. In the local world a node reports its machine's loopback
	// host address; on Azure the two are the same (nil).
	PrivateIP func(internalIP string) (string, bool)
	Log       logr.Logger
}

// Controller is a running cloud controller.
type Controller struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan struct{}
	queue  workqueue.TypedRateLimitingInterface[string]
	nodes  cache.Indexer
	svcs   cache.Indexer
	pods   cache.Indexer
	// warned is the last Warning event per Service, touched by the one
	// worker only.
	warned map[string]string
}

// Start runs the controller until Stop.
func Start(cfg Config) *Controller {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{cfg: cfg, cancel: cancel, done: make(chan struct{}), warned: map[string]string{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](250*time.Millisecond, 10*time.Second))}
	// Without managed fields, which no decision here reads: kube-system
	// alone holds a few pods per node.
	strip := informers.WithTransform(crcache.TransformStripManagedFields())
	f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, strip)
	ni, si := f.Core().V1().Nodes().Informer(), f.Core().V1().Services().Informer()
	c.nodes, c.svcs = ni.GetIndexer(), si.GetIndexer()
	// The cloud-controller-manager runs in kube-system, as its chart
	// installs it.
	pf := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(metav1.NamespaceSystem), strip)
	pi := pf.Core().V1().Pods().Informer()
	// kube-system holds a few pods per node (CNI, kube-proxy,
	// cloud-node-manager): every node's sync looks for the CCM among
	// the CCM pods only, not among thousands.
	_ = pi.AddIndexers(cache.Indexers{ccmIndex: func(o any) ([]string, error) {
		if p, ok := o.(*corev1.Pod); ok && c.isCCM(p) {
			return []string{"true"}, nil
		}
		return nil, nil
	}})
	c.pods = pi.GetIndexer()
	add := func(prefix string) cache.ResourceEventHandlerFuncs {
		h := func(o any) {
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
				c.queue.Add(prefix + k)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, o any) { h(o) }, DeleteFunc: h}
	}
	_, _ = ni.AddEventHandler(add("node/"))
	// Nodes coming, going or changing labels and addresses change the
	// load balancers' backend pool.
	_, _ = ni.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { c.queue.Add(poolKey) },
		UpdateFunc: func(o, n any) {
			if poolRelevant(o.(*corev1.Node), n.(*corev1.Node)) {
				c.queue.Add(poolKey)
			}
		}, DeleteFunc: func(any) { c.queue.Add(poolKey) }})
	_, _ = si.AddEventHandler(add("svc/"))
	// A change of a cloud-controller-manager pod (it starts, turns
	// Ready, goes) is looked at for every object.
	all := func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if p, ok := o.(*corev1.Pod); !ok || !c.isCCM(p) {
			return
		}
		c.Resync()
	}
	_, _ = pi.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: all, UpdateFunc: func(_, o any) { all(o) }, DeleteFunc: all})
	f.Start(ctx.Done())
	pf.Start(ctx.Done())
	go func() {
		defer close(c.done)
		go func() { <-ctx.Done(); c.queue.ShutDown() }()
		if !cache.WaitForCacheSync(ctx.Done(), ni.HasSynced, si.HasSynced, pi.HasSynced) {
			return
		}
		for {
			key, quit := c.queue.Get()
			if quit {
				f.Shutdown()
				pf.Shutdown()
				return
			}
			var err error
			switch {
			case key == poolKey:
				err = c.syncPools(ctx)
			case strings.HasPrefix(key, "node/"):
				err = c.syncNode(ctx, key[5:])
			default:
				err = c.syncService(ctx, key[4:])
			}
			if err != nil && ctx.Err() == nil {
				c.cfg.Log.V(1).Info("cloud controller", "key", key, "error", err.Error())
				c.queue.AddRateLimited(key)
			} else {
				c.queue.Forget(key)
			}
			c.queue.Done(key)
		}
	}()
	return c
}

// Resync looks at every node and Service again: whether a
// cloud-controller-manager acts has changed.
func (c *Controller) Resync() {
	if c == nil || c.nodes == nil || c.svcs == nil {
		return
	}
	for _, k := range c.nodes.ListKeys() {
		c.queue.Add("node/" + k)
	}
	for _, k := range c.svcs.ListKeys() {
		c.queue.Add("svc/" + k)
	}
	c.queue.Add(poolKey)
}

// Stop stops the controller.
func (c *Controller) Stop() {
	c.cancel()
	<-c.done
}

func (c *Controller) isCCM(p *corev1.Pod) bool {
	if c.cfg.Images == nil {
		return false
	}
	for _, ct := range p.Spec.Containers {
		if c.cfg.Images(ct.Image) {
			return true
		}
	}
	return false
}

// Active says whether a cloud-controller-manager pod runs Ready in
// kube-system: only then do its controllers act.
func (c *Controller) Active() bool {
	p, _ := c.activeCCM()
	return p != nil
}

// activeCCM is a cloud-controller-manager pod running Ready, and its
// container, whose flags and cloud config the controllers act by; of
// several (leader election picks one), the oldest.
func (c *Controller) activeCCM() (*corev1.Pod, corev1.Container) {
	var best *corev1.Pod
	var bc corev1.Container
	ccms, _ := c.pods.ByIndex(ccmIndex, "true")
	for _, o := range ccms {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(p) || c.cfg.Images == nil ||
			(c.cfg.Synced != nil && !c.cfg.Synced(p)) {
			continue
		}
		for _, ct := range p.Spec.Containers {
			if c.cfg.Images(ct.Image) && (best == nil || p.CreationTimestamp.Before(&best.CreationTimestamp) ||
				(p.CreationTimestamp.Equal(&best.CreationTimestamp) && p.Name < best.Name)) {
				best, bc = p, ct
			}
		}
	}
	return best, bc
}

// ccmIndex indexes kube-system's pods by whether they run a
// cloud-controller-manager.
const ccmIndex = "ccm"

// poolKey is the queue's key for the backend pools.
const poolKey = "pool"

// poolRelevant says whether a node's change can change its place in the
// backend pool.
func poolRelevant(o, n *corev1.Node) bool {
	return !reflect.DeepEqual(o.Labels, n.Labels) || !reflect.DeepEqual(o.Status.Addresses, n.Status.Addresses) ||
		!reflect.DeepEqual(o.Spec.Taints, n.Spec.Taints) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// syncNode is the node lifecycle controller: a Node whose VM is gone is
// deleted. Nodes are found by provider ID; one without (not initialized by
// the cloud-node-manager yet) is left alone.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	if !c.Active() || c.cfg.Instances == nil {
		return nil
	}
	o, ok, _ := c.nodes.GetByKey(name)
	if !ok {
		return nil
	}
	n := o.(*corev1.Node)
	if n.Spec.ProviderID == "" {
		return nil
	}
	exists, err := c.cfg.Instances.Exists(ctx, n.Spec.ProviderID)
	if err != nil || exists {
		return err
	}
	c.cfg.Log.Info("deleting node: its VM no longer exists", "node", n.Name, "providerID", n.Spec.ProviderID)
	err = c.cfg.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func hasFinalizer(s *corev1.Service) bool {
	for _, f := range s.Finalizers {
		if f == lbFinalizer {
			return true
		}
	}
	return false
}

func (c *Controller) setFinalizer(ctx context.Context, s *corev1.Service, on bool) error {
	cur, err := c.cfg.Client.CoreV1().Services(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var fs []string
	for _, f := range cur.Finalizers {
		if f != lbFinalizer {
			fs = append(fs, f)
		}
	}
	if on {
		fs = append(fs, lbFinalizer)
	}
	cur.Finalizers = fs
	_, err = c.cfg.Client.CoreV1().Services(s.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

func (c *Controller) event(ctx context.Context, s *corev1.Service, typ, reason, msg string) error {
	now := metav1.Now()
	_, err := c.cfg.Client.CoreV1().Events(s.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: s.Name + ".", Namespace: s.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: s.Namespace, Name: s.Name, UID: s.UID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: typ, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "service-controller"},
	}, metav1.CreateOptions{})
	return err
}
