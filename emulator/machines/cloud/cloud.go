// Package cloud is the local world's cloud controller manager, doing for a
// workload cluster what Azure's cloud-controller-manager and
// cloud-node-manager do: it initializes nodes registered by a kubelet with
// --cloud-provider=external (provider ID, then the uninitialized taint
// removed) and gives LoadBalancer Services an external IP, a public IP it
// allocates in the cloud.
package cloud

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// UninitializedTaint is the taint a kubelet with an external cloud
// provider registers with, until the cloud controller initializes it.
const UninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// lbFinalizer keeps a Service until its load balancer IP is released.
const lbFinalizer = "service.kubernetes.io/load-balancer-cleanup"

// PublicIPs allocates the addresses of LoadBalancer Services.
type PublicIPs interface {
	// Allocate returns the address of the public IP named name, creating it.
	Allocate(ctx context.Context, name string) (string, error)
	Release(ctx context.Context, name string) error
}

// Config is one workload cluster's cloud controller.
type Config struct {
	Client kubernetes.Interface
	// ProviderID tells a node's provider ID from its name.
	ProviderID func(nodeName string) (string, bool)
	// PublicIPs may be nil: LoadBalancer Services then stay pending, with
	// an event saying why.
	PublicIPs PublicIPs
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
}

// Start runs the controller until Stop.
func Start(cfg Config) *Controller {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{cfg: cfg, cancel: cancel, done: make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](250*time.Millisecond, 10*time.Second))}
	f := informers.NewSharedInformerFactory(cfg.Client, 0)
	ni, si := f.Core().V1().Nodes().Informer(), f.Core().V1().Services().Informer()
	c.nodes, c.svcs = ni.GetIndexer(), si.GetIndexer()
	add := func(prefix string) cache.ResourceEventHandlerFuncs {
		h := func(o any) {
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
				c.queue.Add(prefix + k)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, o any) { h(o) }, DeleteFunc: h}
	}
	_, _ = ni.AddEventHandler(add("node/"))
	_, _ = si.AddEventHandler(add("svc/"))
	f.Start(ctx.Done())
	go func() {
		defer close(c.done)
		go func() { <-ctx.Done(); c.queue.ShutDown() }()
		if !cache.WaitForCacheSync(ctx.Done(), ni.HasSynced, si.HasSynced) {
			return
		}
		for {
			key, quit := c.queue.Get()
			if quit {
				f.Shutdown()
				return
			}
			var err error
			if len(key) > 5 && key[:5] == "node/" {
				err = c.syncNode(ctx, key[5:])
			} else {
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

// Stop stops the controller.
func (c *Controller) Stop() {
	c.cancel()
	<-c.done
}

func (c *Controller) syncNode(ctx context.Context, name string) error {
	o, ok, _ := c.nodes.GetByKey(name)
	if !ok {
		return nil
	}
	n := o.(*corev1.Node).DeepCopy()
	changed := false
	if n.Spec.ProviderID == "" {
		id, ok := c.cfg.ProviderID(n.Name)
		if !ok {
			return fmt.Errorf("node %s is no machine of this cloud", n.Name)
		}
		n.Spec.ProviderID, changed = id, true
	}
	var kept []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key == UninitializedTaint {
			changed = true
			continue
		}
		kept = append(kept, t)
	}
	if !changed {
		return nil
	}
	n.Spec.Taints = kept
	_, err := c.cfg.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err
}

func ipName(s *corev1.Service) string { return "kubernetes-" + string(s.UID) }

func (c *Controller) syncService(ctx context.Context, key string) error {
	o, ok, _ := c.svcs.GetByKey(key)
	if !ok {
		return nil
	}
	s := o.(*corev1.Service).DeepCopy()
	wants := s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.DeletionTimestamp == nil
	if !wants {
		if !hasFinalizer(s) {
			return nil
		}
		if c.cfg.PublicIPs != nil {
			if err := c.cfg.PublicIPs.Release(ctx, ipName(s)); err != nil {
				return err
			}
		}
		s.Status.LoadBalancer = corev1.LoadBalancerStatus{}
		if s.DeletionTimestamp == nil {
			if _, err := c.cfg.Client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		return c.setFinalizer(ctx, s, false)
	}
	if len(s.Status.LoadBalancer.Ingress) > 0 && hasFinalizer(s) {
		return nil
	}
	if c.cfg.PublicIPs == nil {
		return c.event(ctx, s, "SyncLoadBalancerFailed", "no cloud to allocate a public IP from: the machine runtime was started without an ARM endpoint")
	}
	if !hasFinalizer(s) {
		if err := c.setFinalizer(ctx, s, true); err != nil {
			return err
		}
		return nil // requeued by the update
	}
	ip, err := c.cfg.PublicIPs.Allocate(ctx, ipName(s))
	if err != nil {
		_ = c.event(ctx, s, "SyncLoadBalancerFailed", err.Error())
		return err
	}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	_, err = c.cfg.Client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{})
	if err == nil {
		_ = c.event(ctx, s, "EnsuredLoadBalancer", "Ensured load balancer with public IP "+ip)
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

func (c *Controller) event(ctx context.Context, s *corev1.Service, reason, msg string) error {
	now := metav1.Now()
	typ := corev1.EventTypeNormal
	if reason == "SyncLoadBalancerFailed" {
		typ = corev1.EventTypeWarning
	}
	_, err := c.cfg.Client.CoreV1().Events(s.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: s.Name + ".", Namespace: s.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: s.Namespace, Name: s.Name, UID: s.UID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: typ, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "service-controller"},
	}, metav1.CreateOptions{})
	return err
}
