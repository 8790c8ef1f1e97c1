// Package namedwatch keeps the few objects a caller reads by name up to
// date, each through a watch of its own that selects it by name in its
// namespace, the way the kubelet keeps the Secrets and ConfigMaps its pods
// reference: its Watch strategy starts a reflector per object with a
// metadata.name field selector on first use, serves reads from it, and
// stops it once no read asked for it for five resync periods
// (kubernetes/kubernetes pkg/kubelet/util/manager/watch_based_manager.go,
// newReflector and maxIdleTime, @04791b49).
//
// Both sides use it, so it imports neither: the simulated kubelet for the
// ConfigMaps a container start reads, the manager for the identities'
// Secrets (with a cap, since tenants choose how many Secrets they name).
package namedwatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Client is what a typed client of one namespace offers for a kind, as
// client-go's ConfigMaps(ns) and Secrets(ns) do; L is the kind's list.
type Client[L runtime.Object] interface {
	List(ctx context.Context, o metav1.ListOptions) (L, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// Options tune the watches; the zero value is the kubelet's.
type Options struct {
	// Idle is how long a watch no read asks for lives on (the kubelet's
	// maxIdleTime, five resync periods of a minute, when zero).
	Idle time.Duration
	// Sync bounds a read's wait for a new watch's first list; a read that
	// outlasts it is the caller's to make from the API server (the
	// kubelet's manager waits a second, the default).
	Sync time.Duration
	// Max caps how many objects are watched at once; a read beyond it is
	// the caller's to make from the API server. Zero: no cap.
	Max int
}

// DefaultIdle is the kubelet's maxIdleTime.
const DefaultIdle = 5 * time.Minute

// DefaultSync is the kubelet manager's wait for a new reflector.
const DefaultSync = time.Second

// Watches are the per-name watches of one kind. T is the object type
// (*corev1.Secret), L its list (*corev1.SecretList).
type Watches[T runtime.Object, L runtime.Object, C Client[L]] struct {
	resource schema.GroupResource
	client   func(namespace string) C
	done     <-chan struct{}
	opts     Options

	mu    sync.Mutex
	items map[key]*item
}

type key struct{ namespace, name string }

type item struct {
	informer cache.SharedIndexInformer
	stop     chan struct{}
	lastUsed time.Time
}

// New returns the watches of resource's objects through client (for
// example cs.CoreV1().Secrets); they all end when done closes.
func New[T runtime.Object, L runtime.Object, C Client[L]](resource schema.GroupResource, client func(namespace string) C, done <-chan struct{}, o Options) *Watches[T, L, C] {
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.Sync <= 0 {
		o.Sync = DefaultSync
	}
	return &Watches[T, L, C]{resource: resource, client: client, done: done, opts: o, items: map[key]*item{}}
}

// Get returns the object as its watch last saw it. ok is false when the
// caller must read it from the API server instead: its watch has not
// listed it yet, or none could start because Max are running. An object
// the watch does not have is NotFound. The object is shared with the
// watch: callers must not modify it.
func (w *Watches[T, L, C]) Get(ctx context.Context, namespace, name string) (obj T, ok bool, err error) {
	var zero T
	k := key{namespace, name}
	it, started := w.watch(k)
	if it == nil {
		return zero, false, nil
	}
	if !it.informer.HasSynced() {
		if !started {
			// Not listed since it started (the API server refuses it,
			// or is slow): the read does not wait for it again.
			return zero, false, nil
		}
		sctx, cancel := context.WithTimeout(ctx, w.opts.Sync)
		defer cancel()
		if !cache.WaitForCacheSync(sctx.Done(), it.informer.HasSynced) {
			return zero, false, nil
		}
	}
	got, exists, err := it.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil {
		return zero, false, err
	}
	if !exists {
		return zero, true, apierrors.NewNotFound(w.resource, name)
	}
	t, isT := got.(T)
	if !isT {
		return zero, false, fmt.Errorf("the watch of %s %s/%s holds a %T", w.resource, namespace, name, got)
	}
	return t, true, nil
}

// Watched is how many objects are watched now.
func (w *Watches[T, L, C]) Watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.items)
}

// Max is the cap on the watches (0: none).
func (w *Watches[T, L, C]) Max() int { return w.opts.Max }

// watch returns k's watch, started on first use unless Max are running
// (then nil), and stops those no read asked for in Idle.
func (w *Watches[T, L, C]) watch(k key) (it *item, started bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for other, it := range w.items {
		if other != k && now.Sub(it.lastUsed) > w.opts.Idle {
			close(it.stop)
			delete(w.items, other)
		}
	}
	if it, ok := w.items[k]; ok {
		it.lastUsed = now
		return it, false
	}
	if w.opts.Max > 0 && len(w.items) >= w.opts.Max {
		return nil, false
	}
	// Only this object, in its namespace: the watch never carries
	// another's data.
	sel := fields.OneTermEqualSelector("metadata.name", k.name).String()
	c := w.client(k.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.Watch(ctx, o)
		},
	}
	var example T
	it = &item{informer: cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{}), stop: make(chan struct{}), lastUsed: now}
	go it.informer.RunWithContext(contextUntil(it.stop, w.done))
	w.items[k] = it
	return it, true
}

// contextUntil is a context that ends when either channel closes.
func contextUntil(a, b <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		select {
		case <-a:
		case <-b:
		}
	}()
	return ctx
}
