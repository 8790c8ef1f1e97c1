package kubelet

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
)

// WatchedConfigMaps returns c with its ConfigMap GETs served the way the
// kubelet's ConfigMap manager serves them (its default Watch strategy):
// each ConfigMap a read names gets a watch of its own, selecting it by
// name in its namespace, and reads come from what the watch last saw; a
// watch nothing read for five minutes stops (kubernetes/kubernetes
// pkg/kubelet/util/manager/watch_based_manager.go, newReflector and
// maxIdleTime, @04791b49). Before, every container start read each
// ConfigMap its environment and volumes name from the API server, a dozen
// times per pod. Every other request goes to c; the watches end when done
// closes.
func WatchedConfigMaps(c kubernetes.Interface, done <-chan struct{}) kubernetes.Interface {
	return &cmClient{Interface: c, core: &cmCore{CoreV1Interface: c.CoreV1(), watches: &cmWatches{client: c, done: done, items: map[string]*cmWatch{}}}}
}

type cmClient struct {
	kubernetes.Interface
	core *cmCore
}

func (c *cmClient) CoreV1() typedcorev1.CoreV1Interface { return c.core }

type cmCore struct {
	typedcorev1.CoreV1Interface
	watches *cmWatches
}

func (c *cmCore) ConfigMaps(ns string) typedcorev1.ConfigMapInterface {
	return &cmNamespace{ConfigMapInterface: c.CoreV1Interface.ConfigMaps(ns), ns: ns, watches: c.watches}
}

type cmNamespace struct {
	typedcorev1.ConfigMapInterface
	ns      string
	watches *cmWatches
}

// Get reads the ConfigMap from its watch; a read at a resource version
// goes to the API server.
func (c *cmNamespace) Get(ctx context.Context, name string, o metav1.GetOptions) (*corev1.ConfigMap, error) {
	if o.ResourceVersion != "" {
		return c.ConfigMapInterface.Get(ctx, name, o)
	}
	cm, ok, err := c.watches.get(ctx, c.ns, name)
	if !ok {
		// The watch has not listed yet: the kubelet's manager would
		// wait, the API server answers at once.
		return c.ConfigMapInterface.Get(ctx, name, o)
	}
	return cm, err
}

// cmIdle is the kubelet's maxIdleTime: five resync periods of a minute.
const cmIdle = 5 * time.Minute

// cmSync bounds the wait for a new watch's first list (the kubelet's
// manager waits a second).
const cmSync = time.Second

type cmWatches struct {
	client kubernetes.Interface
	done   <-chan struct{}

	mu    sync.Mutex
	items map[string]*cmWatch
}

type cmWatch struct {
	informer cache.SharedIndexInformer
	stop     chan struct{}
	lastUsed time.Time
}

func (w *cmWatches) get(ctx context.Context, ns, name string) (*corev1.ConfigMap, bool, error) {
	key := ns + "/" + name
	item, started := w.watch(ns, name, key)
	if !item.informer.HasSynced() {
		if !started {
			// Not listed since it started (the API server refuses it,
			// or is slow): the read does not wait for it again.
			return nil, false, nil
		}
		sctx, cancel := context.WithTimeout(ctx, cmSync)
		defer cancel()
		if !cache.WaitForCacheSync(sctx.Done(), item.informer.HasSynced) {
			return nil, false, nil
		}
	}
	obj, exists, err := item.informer.GetStore().GetByKey(key)
	if err != nil {
		return nil, true, err
	}
	if !exists {
		return nil, true, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, true, fmt.Errorf("the watch of ConfigMap %s holds a %T", key, obj)
	}
	// Callers own what they get, as from the API server.
	return cm.DeepCopy(), true, nil
}

// watch returns the ConfigMap's watch, started on first use, and stops
// those no read asked for in cmIdle.
func (w *cmWatches) watch(ns, name, key string) (it *cmWatch, started bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for k, it := range w.items {
		if k != key && now.Sub(it.lastUsed) > cmIdle {
			close(it.stop)
			delete(w.items, k)
		}
	}
	if it, ok := w.items[key]; ok {
		it.lastUsed = now
		return it, false
	}
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	cms := w.client.CoreV1().ConfigMaps(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return cms.Watch(ctx, o)
		},
	}
	it = &cmWatch{informer: cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{}), stop: make(chan struct{}), lastUsed: now}
	ctx, cancel := context.WithCancel(context.Background())
	go func(stop <-chan struct{}) {
		defer cancel()
		select {
		case <-stop:
		case <-w.done:
		}
	}(it.stop)
	go it.informer.RunWithContext(ctx)
	w.items[key] = it
	return it, true
}
