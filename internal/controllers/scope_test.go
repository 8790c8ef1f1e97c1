package controllers_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
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
	// watchers are told of each namespace added after they opened.
	watchers map[*scopedWatch]bool
}

func (s *scope) has(ns string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nss[ns]
}

// namespaces is the scope's namespaces now.
func (s *scope) namespaces() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.nss))
}

// parallel runs t beside the package's other parallel tests, its managers
// scoped to the namespaces it makes.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	scopes.Store(t.Name(), &scope{nss: map[string]bool{}, watchers: map[*scopedWatch]bool{}})
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
	s := scopeOf(t)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nss[ns] {
		return
	}
	s.nss[ns] = true
	for w := range s.watchers {
		w.open(ns, "")
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
			namespaced, err := env.Client.IsObjectNamespaced(obj)
			return toolscache.NewSharedIndexInformer(&scopedListerWatcher{lw: toolscache.ToListerWatcherWithContext(lw), s: s,
				byServer: err == nil && namespaced}, obj, resync, idx)
		}
	}
	return o
}

// scopedListerWatcher feeds an informer only the namespaced objects of a
// scope. For a namespaced kind the API server does the filtering: a watch
// per namespace of the scope (a field selector on metadata.namespace, one
// more opened as the test adds a namespace), merged into the one the
// informer reads. Filtered here instead, every test's manager received and
// decoded every other parallel test's events: about a quarter of the test
// process's CPU, and the API server's to send them.
type scopedListerWatcher struct {
	lw toolscache.ListerWatcherWithContext
	s  *scope
	// byServer: the kind is namespaced, and the API server filters it.
	byServer bool
}

// noNamespace is a field-selector value no namespace has (a namespace's
// name starts with a letter or digit): a list of it is empty but for its
// resource version.
const noNamespace = "-"

// IsWatchListSemanticsUnSupported makes the informer list, then watch from
// the list's resource version: a merged watch has no single stream whose
// initial events it could end (client-go util/watchlist).
func (w *scopedListerWatcher) IsWatchListSemanticsUnSupported() bool { return w.byServer }

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
	list, err := w.list(ctx, o)
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

// list lists the scope. With one namespace or none the API server filters
// the list; with more it lists everything, and the list is filtered here (a
// field selector names one namespace). A list the server filtered is taken
// again if the test added a namespace while it was under way: the list's
// resource version may already include what the test made in it, which the
// filter left out and a watch from that version would never send.
func (w *scopedListerWatcher) list(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
	for {
		nss := w.s.namespaces()
		if !w.byServer || len(nss) > 1 {
			return w.lw.ListWithContext(ctx, o)
		}
		ns := noNamespace
		if len(nss) == 1 {
			ns = nss[0]
		}
		o.FieldSelector = "metadata.namespace=" + ns
		list, err := w.lw.ListWithContext(ctx, o)
		if err != nil || slices.Equal(nss, w.s.namespaces()) {
			return list, err
		}
	}
}

func (w *scopedListerWatcher) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if w.byServer {
		return w.watchByNamespace(ctx, o)
	}
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

// watchByNamespace opens a watch of each namespace of the scope from o's
// resource version, and of each namespace added later from its current
// state (a watch without a resource version begins with an ADDED event
// per object already there, so nothing made before it opened is missed).
func (w *scopedListerWatcher) watchByNamespace(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	ctx, cancel := context.WithCancel(ctx)
	sw := &scopedWatch{lw: w.lw, ctx: ctx, cancel: cancel, opts: o, result: make(chan watch.Event), s: w.s}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	for ns := range w.s.nss {
		sw.open(ns, o.ResourceVersion)
	}
	w.s.watchers[sw] = true
	return sw, nil
}

// scopedWatch merges the watches of a scope's namespaces. The streams'
// events interleave out of resource-version order, so a resource version
// read from the merged stream is no place to resume all of them from:
// when any stream ends or fails, the merged watch ends with 410 Expired,
// and the informer lists again (client-go's reflector does on Expired).
type scopedWatch struct {
	lw     toolscache.ListerWatcherWithContext
	ctx    context.Context
	cancel context.CancelFunc
	opts   metav1.ListOptions
	result chan watch.Event
	s      *scope
	once   sync.Once
}

// open starts the watch of ns from resource version rv ("": its current
// state, then its changes). Called with the scope's lock held.
func (sw *scopedWatch) open(ns, rv string) {
	o := sw.opts
	o.ResourceVersion, o.FieldSelector, o.AllowWatchBookmarks = rv, "metadata.namespace="+ns, false
	go func() {
		wi, err := sw.lw.WatchWithContext(sw.ctx, o)
		if err != nil {
			sw.end()
			return
		}
		defer wi.Stop()
		for {
			select {
			case <-sw.ctx.Done():
				return
			case e, ok := <-wi.ResultChan():
				if !ok || e.Type == watch.Error {
					sw.end()
					return
				}
				select {
				case sw.result <- e:
				case <-sw.ctx.Done():
					return
				}
			}
		}
	}()
}

// end sends the informer a 410 Expired, once, then stops the watch.
func (sw *scopedWatch) end() {
	sw.once.Do(func() {
		expired := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
			Message: "a namespace's watch of the test's scope ended"}
		select {
		case sw.result <- watch.Event{Type: watch.Error, Object: expired}:
		case <-sw.ctx.Done():
		}
		sw.Stop()
	})
}

func (sw *scopedWatch) Stop() {
	sw.s.mu.Lock()
	delete(sw.s.watchers, sw)
	sw.s.mu.Unlock()
	sw.cancel()
}

func (sw *scopedWatch) ResultChan() <-chan watch.Event { return sw.result }
