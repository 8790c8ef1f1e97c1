package startneeds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Watch is one resource a running component lists and then watches with
// its own credentials, as its informer (or Calico's watcher cache) does.
type Watch struct {
	Group    string `json:"group,omitempty"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	// OwnNode narrows the list to the component's node
	// (fieldSelector metadata.name=<node>), as kube-proxy's node informer.
	OwnNode       bool   `json:"ownNode,omitempty"`
	LabelSelector string `json:"labelSelector,omitempty"`
	FieldSelector string `json:"fieldSelector,omitempty"`
	// IfServed: listed only while discovery serves the resource. For
	// kinds whose CRDs the rendered add-on may not install yet: the API
	// server authorizes before it looks the resource up, so a component
	// without the rule gets 403 even for a resource nobody installed
	// (see the report of issue 47).
	IfServed bool `json:"ifServed,omitempty"`
	// Optional: the component does not wait for this resource before it
	// acts (its failure is logged, retried, and blocks nothing).
	Optional bool `json:"optional,omitempty"`
}

func (w Watch) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: w.Group, Version: w.Version, Resource: w.Resource}
}

func (w Watch) String() string { return groupResource(w.Group, w.Resource) }

// Sync is how a component treats what it lists.
type Sync struct {
	// NotFoundSynced: a 404 (the type is not installed) counts as synced
	// and the list is tried again after MissingRetry, as Calico's
	// watcherCache does (libcalico-go/lib/backend/watchersyncer/
	// watchercache.go, v3.30.7 74485ea4: only kerrors.IsNotFound marks
	// the cache in-sync; every other error, 403 included, is retried
	// after ListRetryInterval, forever).
	NotFoundSynced bool          `json:"notFoundSynced,omitempty"`
	MissingRetry   time.Duration `json:"missingRetry,omitempty"`
	// Retry is the first wait after a failed list; each further failure
	// doubles it up to MaxRetry (client-go's reflector backs off 800ms
	// to 30s; Calico retries every ListRetryInterval, 1s).
	Retry    time.Duration `json:"retry"`
	MaxRetry time.Duration `json:"maxRetry"`
}

// Session is a running component's lists and watches, made with the
// credentials its pod has. Synced says whether every required resource
// has been listed once: what the component waits for before it acts.
type Session struct {
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	reads   atomic.Int64
	mu      sync.Mutex
	state   map[string]*watchState
	watches []Watch
	synced  bool
	// onChange is told when Synced changes.
	onChange func(synced bool)
}

type watchState struct {
	synced bool
	err    string
	// logged is the last error logged: a component retrying every
	// second logs a new error, not each retry.
	logged string
}

// SessionConfig starts a Session.
type SessionConfig struct {
	// Config reaches the API server with the pod's credentials.
	Config  *rest.Config
	Node    string
	Watches []Watch
	Sync    Sync
	// Log, when set, receives what the component logs about its lists.
	Log func(format string, args ...any)
	// OnChange, when set, is told whenever Synced changes.
	OnChange func(synced bool)
	// Client is the component's client-side rate limit; zero fields are
	// client-go's defaults (QPS 5, burst 10).
	Client ClientLimits
	// OnList and OnEvent, when set, receive each list's items (nil for a
	// kind not installed or not served) and each watch event, as their
	// namespace, name and version: what a fan-out server (Typha) caches.
	// Only then are names decoded.
	OnList  func(w Watch, items []metav1.PartialObjectMetadata)
	OnEvent func(w Watch, typ watch.EventType, obj *metav1.PartialObjectMetadata)
}

// ClientLimits are a component's client-go rate limit: its lists and
// watches wait for a token once they exceed Burst, and tokens come back
// at QPS. A component whose start needs more requests than its burst
// starts as late as the limit makes it, so the simulation uses the
// component's own figures, not client-go's defaults.
type ClientLimits struct {
	QPS   float32 `json:"qps,omitempty"`
	Burst int     `json:"burst,omitempty"`
}

// newLimiter makes each client's token bucket (a test replaces it to
// count what a bucket that never refills lets through).
var newLimiter = func(qps float32, burst int) flowcontrol.RateLimiter {
	return flowcontrol.NewTokenBucketRateLimiter(qps, burst)
}

// discoveryBurst is client-go's burst for a discovery client whose
// config sets none (discovery/discovery_client.go, setDiscoveryDefaults).
const discoveryBurst = 300

// limited is cfg with its own token bucket of the component's limits;
// where the component sets none, client-go's QPS and defaultBurst.
func (l ClientLimits) limited(cfg *rest.Config, defaultBurst int) *rest.Config {
	c := rest.CopyConfig(cfg)
	qps, burst := l.QPS, l.Burst
	if qps == 0 {
		qps = rest.DefaultQPS
	}
	if burst == 0 {
		burst = defaultBurst
	}
	c.RateLimiter = newLimiter(qps, burst)
	return c
}

// StartSession lists and watches cfg.Watches until Stop.
func StartSession(cfg SessionConfig) (*Session, error) {
	s := &Session{done: make(chan struct{}), state: map[string]*watchState{}, watches: cfg.Watches, onChange: cfg.OnChange}
	rc := rest.CopyConfig(cfg.Config)
	prev := rc.WrapTransport
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return countingTransport{rt: rt, n: &s.reads}
	}
	// Each client has its bucket, as each of the component's clients has.
	if cfg.OnList == nil {
		cfg.OnList = func(Watch, []metav1.PartialObjectMetadata) {}
	}
	mc, err := newVersionsClient(cfg.Client.limited(rc, rest.DefaultBurst), cfg.OnEvent != nil)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg.Client.limited(rc, discoveryBurst))
	if err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.ctx, s.cancel = ctx, cancel
	// Every watch's state exists before the first list runs: a list that
	// answers reads all of them (notSynced), and the map is not written
	// again once the goroutines start.
	for _, w := range cfg.Watches {
		s.state[w.String()] = &watchState{err: "not listed yet"}
	}
	var wg sync.WaitGroup
	for _, w := range cfg.Watches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, mc, dc, cfg, w)
		}()
	}
	go func() { wg.Wait(); close(s.done) }()
	return s, nil
}

// CountRequests wraps rt to add one to n for each request it sends: a
// component's own requests, as its sessions count them.
func CountRequests(rt http.RoundTripper, n *atomic.Int64) http.RoundTripper {
	return countingTransport{rt: rt, n: n}
}

type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// Reads is the number of requests the session has sent (lists, watches,
// discovery).
func (s *Session) Reads() int64 { return s.reads.Load() }

// Done is closed once Stop is called.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Stop ends the lists and watches.
func (s *Session) Stop() {
	s.cancel()
	<-s.done
}

// Synced says whether every required resource has been listed.
func (s *Session) Synced() bool { return s.NotSynced() == "" }

// NotSynced names the required resources not listed yet and why ("" when
// every one is).
func (s *Session) NotSynced() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notSynced()
}

func (s *Session) notSynced() string {
	var out []string
	for _, w := range s.watches {
		if st := s.state[w.String()]; !w.Optional && !st.synced {
			out = append(out, w.String()+": "+st.err)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// set records a list's outcome; it says whether the error is new (to be
// logged).
func (s *Session) set(w Watch, synced bool, err string) bool {
	s.mu.Lock()
	st := s.state[w.String()]
	st.err = err
	st.synced = st.synced || synced
	fresh := err != "" && err != st.logged
	if err != "" {
		st.logged = err
	}
	was := s.synced
	s.synced = s.notSynced() == ""
	now := s.synced
	s.mu.Unlock()
	if was != now && s.onChange != nil {
		s.onChange(now)
	}
	return fresh
}

func (s *Session) run(ctx context.Context, mc *versionsClient, dc discovery.DiscoveryInterface, cfg SessionConfig, w Watch) {
	wait := cfg.Sync.Retry
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	opts := metav1.ListOptions{Limit: 500, LabelSelector: w.LabelSelector, FieldSelector: w.FieldSelector}
	if w.OwnNode {
		opts.FieldSelector = "metadata.name=" + cfg.Node
	}
	for ctx.Err() == nil {
		if w.IfServed && !served(dc, w) {
			cfg.OnList(w, nil)
			s.set(w, true, "")
			if !sleep(cfg.Sync.MissingRetry) {
				return
			}
			continue
		}
		list, err := mc.list(ctx, w.gvr(), opts)
		switch {
		case ctx.Err() != nil:
			return
		case apierrors.IsNotFound(err) && cfg.Sync.NotFoundSynced:
			cfg.OnList(w, nil)
			s.set(w, true, "")
			if !sleep(cfg.Sync.MissingRetry) {
				return
			}
			continue
		case err != nil:
			if s.set(w, false, err.Error()) {
				cfg.Log("failed to list %s: %v", w, err)
			}
			if !sleep(wait) {
				return
			}
			wait = min(2*wait, cfg.Sync.MaxRetry)
			continue
		}
		cfg.OnList(w, list.Items)
		s.set(w, true, "")
		// Then watch from the list's version; when the server ends a
		// watch (client-go asks for 5 to 10 minutes), watch again from
		// the last version seen, and list again only when that version
		// is gone (410) or the watch fails, as a reflector does.
		if !s.watch(ctx, mc, cfg, w, opts, list.ResourceVersion) {
			if !sleep(wait) {
				return
			}
			wait = min(2*wait, cfg.Sync.MaxRetry)
			continue
		}
		wait = cfg.Sync.Retry
	}
}

// watch watches w from rv until it must be listed again: false when a
// watch request failed (to be retried after a back-off).
func (s *Session) watch(ctx context.Context, mc *versionsClient, cfg SessionConfig, w Watch, opts metav1.ListOptions, rv string) bool {
	for ctx.Err() == nil {
		wo := opts
		wo.Limit, wo.ResourceVersion, wo.Watch, wo.AllowWatchBookmarks = 0, rv, true, true
		wo.TimeoutSeconds = ptr(int64(300 + rand.IntN(300))) //nolint:gosec // jitter, not a secret
		wi, err := mc.watch(ctx, w.gvr(), wo)
		if err != nil {
			// Listed, so still in sync.
			if s.set(w, true, "watch: "+err.Error()) {
				cfg.Log("failed to watch %s: %v", w, err)
			}
			return false
		}
		gone := false
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				gone = true
				continue
			}
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				rv = m.GetResourceVersion()
			}
			if o, ok := ev.Object.(*metav1.PartialObjectMetadata); ok && cfg.OnEvent != nil && ev.Type != watch.Bookmark {
				cfg.OnEvent(w, ev.Type, o)
			}
		}
		wi.Stop()
		if gone {
			return true
		}
	}
	return true
}

func ptr[T any](v T) *T { return &v }

// served says whether discovery, asked with the component's own
// credentials, serves the resource.
func served(dc discovery.DiscoveryInterface, w Watch) bool {
	list, err := dc.ServerResourcesForGroupVersion(schema.GroupVersion{Group: w.Group, Version: w.Version}.String())
	if err != nil || list == nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == w.Resource {
			return true
		}
	}
	return false
}

// Describe is a session's state for a log line.
func (s *Session) Describe() string {
	if ns := s.NotSynced(); ns != "" {
		return fmt.Sprintf("not in sync: %s", ns)
	}
	return "in sync"
}
