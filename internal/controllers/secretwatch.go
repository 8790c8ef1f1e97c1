package controllers

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// SecretWatch keeps the few Secrets it is asked for (the identities' Secrets
// in use) up to date, each through a watch of its own selecting it by name,
// the way the kubelet keeps the Secrets and ConfigMaps its pods reference
// (kubernetes/kubernetes pkg/kubelet/util/manager/watch_based_manager.go
// newReflector, a metadata.name field selector per object, stopped once
// idle; @04791b49). The manager caches no other Secret (SecretCache), and
// reading an identity's Secret no longer costs a GET per reconcile of every
// AzureCluster, AzureMachine and pool machine: the management API server's
// largest share of requests at bring-up.
type SecretWatch struct {
	client kubernetes.Interface
	// done ends every watch (the manager stopping).
	done <-chan struct{}
	// idle is how long a watch no read asks for lives on.
	idle time.Duration
	// max is how many Secrets are watched at once (secretWatchMax).
	max int

	mu    sync.Mutex
	items map[types.NamespacedName]*watchedSecret
}

type watchedSecret struct {
	informer cache.SharedIndexInformer
	stop     chan struct{}
	lastUsed time.Time
}

// secretWatchIdle is how long an unused Secret's watch stays: the kubelet
// keeps one five resync periods (5 minutes by default).
const secretWatchIdle = 5 * time.Minute

// secretWatchSync bounds the wait for a new watch's first list; a read
// that outlasts it goes to the API server.
const secretWatchSync = 5 * time.Second

// secretWatchMax caps the watches: each costs the manager an informer, a
// goroutine and a long-lived watch on the API server, and tenants choose
// how many identities name distinct Secrets, so without a cap they choose
// how many the manager opens. An operator's clusters use a handful of
// identities; 256 leaves room for many while bounding what a tenant can
// make the manager hold. A Secret beyond it is read from the API server, as
// one whose watch has not listed it yet.
const secretWatchMax = 256

// NewSecretWatch returns a SecretWatch whose watches end when done closes.
func NewSecretWatch(c kubernetes.Interface, done <-chan struct{}) *SecretWatch {
	return &SecretWatch{client: c, done: done, idle: secretWatchIdle, max: secretWatchMax, items: map[types.NamespacedName]*watchedSecret{}}
}

// newManagerSecretWatch is a SecretWatch whose watches last as long as the
// manager runs.
func newManagerSecretWatch(mgr ctrl.Manager) (*SecretWatch, error) {
	c, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		close(done)
		return nil
	})); err != nil {
		return nil, err
	}
	return NewSecretWatch(c, done), nil
}

// Get returns the Secret as its watch last saw it; ok is false when the
// watch has not listed it yet, or when no watch is started for it because
// secretWatchMax are running (the caller reads it from the API server).
// A Secret the watch does not have is NotFound. Callers must not modify
// it.
func (w *SecretWatch) Get(ctx context.Context, key types.NamespacedName) (s *corev1.Secret, ok bool, err error) {
	item, started := w.watch(key)
	if item == nil {
		return nil, false, nil
	}
	if !item.informer.HasSynced() {
		if !started {
			// Not listed since it started (the API server refuses it,
			// or is slow): the read does not wait for it again.
			return nil, false, nil
		}
		sctx, cancel := context.WithTimeout(ctx, secretWatchSync)
		defer cancel()
		if !cache.WaitForCacheSync(sctx.Done(), item.informer.HasSynced) {
			return nil, false, nil
		}
	}
	obj, exists, err := item.informer.GetStore().GetByKey(key.Namespace + "/" + key.Name)
	if err != nil {
		return nil, false, err
	}
	if !exists {
		return nil, true, apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
	}
	s, isSecret := obj.(*corev1.Secret)
	if !isSecret {
		return nil, false, fmt.Errorf("the watch of Secret %s holds a %T", key, obj)
	}
	return s, true, nil
}

// watch returns key's watch, started on first use unless w.max are
// running (then nil), and stops those no read asked for in w.idle.
func (w *SecretWatch) watch(key types.NamespacedName) (it *watchedSecret, started bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for k, it := range w.items {
		if k != key && now.Sub(it.lastUsed) > w.idle {
			close(it.stop)
			delete(w.items, k)
		}
	}
	if it, ok := w.items[key]; ok {
		it.lastUsed = now
		return it, false
	}
	if len(w.items) >= w.max {
		return nil, false
	}
	// Only this Secret, in its namespace: the watch never carries another
	// Secret's data.
	sel := fields.OneTermEqualSelector("metadata.name", key.Name).String()
	secrets := w.client.CoreV1().Secrets(key.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return secrets.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return secrets.Watch(ctx, o)
		},
	}
	it = &watchedSecret{informer: cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{}), stop: make(chan struct{}), lastUsed: now}
	go it.informer.RunWithContext(contextUntil(it.stop, w.done))
	w.items[key] = it
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
