package controllers_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/winkube/winkube/internal/controllers"
)

// Tests that only wait (for the emulator's operations, a backoff, a
// requeue) run in parallel with each other. Their managers would otherwise
// all reconcile every namespace, each against its own emulator, and fight
// over the same objects: a parallel test's managers see only the namespaces
// the test made (its scope). Namespaced objects elsewhere never reach their
// caches, so never their reconcilers; cluster-scoped objects still do.
// Tests that read process-wide figures (the reconcile metrics, the API
// server's request counts, the suite emulator's counters or Run Command
// answers) stay serial: Go runs them before any parallel test resumes.
const parallelTests = 8

var scopes sync.Map // top-level test name → *scope

type scope struct {
	mu  sync.Mutex
	nss map[string]bool
}

func (s *scope) has(ns string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nss[ns]
}

// parallel runs t beside the package's other parallel tests, its managers
// scoped to the namespaces it makes.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	scopes.Store(t.Name(), &scope{nss: map[string]bool{}})
}

// scopeOf is the scope of t's top-level test, nil for a serial test.
func scopeOf(t testing.TB) *scope {
	top, _, _ := strings.Cut(t.Name(), "/")
	if s, ok := scopes.Load(top); ok {
		return s.(*scope)
	}
	return nil
}

// ownNamespace adds a namespace t made to its scope: its managers see what
// is in it. It is called before anything is created in it.
func ownNamespace(t testing.TB, ns string) {
	if s := scopeOf(t); s != nil {
		s.mu.Lock()
		s.nss[ns] = true
		s.mu.Unlock()
	}
}

// managerOptions are the options of a test's manager: no metrics listener,
// Secrets cached and read as the manager's own deployments do
// (internal/incluster/manager.go, internal/localworld/world.go: only
// clusters' Secrets cached, every Secret read from the API server), and,
// for a parallel test, a cache that holds only its scope. Without the
// former, each manager listed and watched every Secret the suite made, and
// a pool read its bootstrap data from a cache that could lag the change a
// test made just before (a scale-up then sent the old custom data, which
// the deployed manager, reading it live, never does).
func managerOptions(t testing.TB) ctrl.Options {
	o := ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controllers.SecretCache(cache.Options{}), Client: controllers.ReadSecretsLive(client.Options{})}
	if s := scopeOf(t); s != nil {
		o.Cache.NewInformer = func(lw toolscache.ListerWatcher, obj kruntime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
			return toolscache.NewSharedIndexInformer(&scopedListerWatcher{lw: toolscache.ToListerWatcherWithContext(lw), s: s}, obj, resync, idx)
		}
	}
	return o
}

// scopedListerWatcher drops the namespaced objects outside a scope from
// the lists and watches an informer is fed.
type scopedListerWatcher struct {
	lw toolscache.ListerWatcherWithContext
	s  *scope
}

func (w *scopedListerWatcher) in(obj kruntime.Object) bool {
	m, err := meta.Accessor(obj)
	return err != nil || m.GetNamespace() == "" || w.s.has(m.GetNamespace())
}

func (w *scopedListerWatcher) List(o metav1.ListOptions) (kruntime.Object, error) {
	return w.ListWithContext(context.Background(), o)
}

func (w *scopedListerWatcher) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return w.WatchWithContext(context.Background(), o)
}

func (w *scopedListerWatcher) ListWithContext(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
	list, err := w.lw.ListWithContext(ctx, o)
	if err != nil {
		return list, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	kept := items[:0]
	for _, it := range items {
		if w.in(it) {
			kept = append(kept, it)
		}
	}
	return list, meta.SetList(list, kept)
}

func (w *scopedListerWatcher) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	wi, err := w.lw.WatchWithContext(ctx, o)
	if err != nil {
		return wi, err
	}
	return watch.Filter(wi, func(e watch.Event) (watch.Event, bool) {
		switch e.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			return e, w.in(e.Object)
		}
		return e, true
	}), nil
}
