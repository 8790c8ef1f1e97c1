// Package apicallers counts the API requests a controller manager makes by
// the controller whose reconcile made them.
//
// All of a manager's controllers share one rest.Config, so neither the
// client's user agent nor the API server's own metric can tell them apart.
// What each request does carry is its reconcile's context, and in it the
// logger controller-runtime's builder gave the controller, with its name
// under the key "controller" (controller-runtime v0.24.1
// pkg/builder/controller.go, doBuild's default LogConstructor; Cluster API's
// own builder sets the same key: cluster-api v1.14.2
// util/controller/builder.go). A manager built with Counter.Logger and a
// config wrapped with Counter.Wrap has each of its requests counted under
// that name; a request made outside any reconcile (the caches' lists and
// watches, webhooks, leader election) is counted under "".
package apicallers

import (
	"net/http"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Key is one line of the count: the controller, and the request as the API
// server's apiserver_request_total names it ("PATCH machines/status").
type Key struct {
	Controller string
	Request    string
}

// Counter counts requests by controller. Its zero value is not usable: New.
type Counter struct {
	mu sync.Mutex
	n  map[Key]float64
}

// New returns an empty Counter.
func New() *Counter { return &Counter{n: map[Key]float64{}} }

// Counts is a copy of the counts so far.
func (c *Counter) Counts() map[Key]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[Key]float64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// Logger wraps l so that the loggers derived from it remember the
// controller they were made for; give it to the manager (ctrl.Options.Logger).
func (c *Counter) Logger(l logr.Logger) logr.Logger {
	return logr.New(&sink{inner: l.GetSink()})
}

// Wrap counts each request that passes through rt; give it to the manager's
// rest.Config (Config.Wrap).
func (c *Counter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{c: c, next: rt}
}

type roundTripper struct {
	c    *Counter
	next http.RoundTripper
}

// requestInfo reads a request's verb and resource as the API server does.
var requestInfo = &request.RequestInfoFactory{
	APIPrefixes:          map[string]sets.Empty{"api": {}, "apis": {}},
	GrouplessAPIPrefixes: map[string]sets.Empty{"api": {}},
}

// verbs turns the API server's request verbs into the names its
// apiserver_request_total metric gives them.
var verbs = map[string]string{"create": "POST", "update": "PUT", "deletecollection": "DELETE"}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	k := Key{Controller: controllerOf(req)}
	if info, err := requestInfo.NewRequestInfo(req); err == nil && info.IsResourceRequest {
		verb, ok := verbs[info.Verb]
		if !ok {
			verb = strings.ToUpper(info.Verb)
		}
		k.Request = verb + " " + info.Resource
		if info.Subresource != "" {
			k.Request += "/" + info.Subresource
		}
	} else {
		k.Request = req.Method + " (non-resource)"
	}
	t.c.mu.Lock()
	t.c.n[k]++
	t.c.mu.Unlock()
	return t.next.RoundTrip(req)
}

func controllerOf(req *http.Request) string {
	l, err := logr.FromContext(req.Context())
	if err != nil {
		return ""
	}
	if s, ok := l.GetSink().(*sink); ok {
		return s.controller
	}
	return ""
}

// sink passes everything to inner and remembers the "controller" value it
// was given.
type sink struct {
	inner      logr.LogSink
	controller string
}

func (s *sink) Init(info logr.RuntimeInfo) {
	if s.inner != nil {
		// One frame more: this sink's own method.
		info.CallDepth++
		s.inner.Init(info)
	}
}

func (s *sink) Enabled(level int) bool { return s.inner != nil && s.inner.Enabled(level) }

func (s *sink) Info(level int, msg string, kv ...any) {
	if s.inner != nil {
		s.inner.Info(level, msg, kv...)
	}
}

func (s *sink) Error(err error, msg string, kv ...any) {
	if s.inner != nil {
		s.inner.Error(err, msg, kv...)
	}
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	out := &sink{inner: s.inner, controller: s.controller}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok && k == "controller" {
			if v, ok := kv[i+1].(string); ok {
				out.controller = v
			}
		}
	}
	if s.inner != nil {
		out.inner = s.inner.WithValues(kv...)
	}
	return out
}

func (s *sink) WithName(name string) logr.LogSink {
	if s.inner == nil {
		return s
	}
	return &sink{inner: s.inner.WithName(name), controller: s.controller}
}

func (s *sink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.inner.(logr.CallDepthLogSink); ok {
		return &sink{inner: cd.WithCallDepth(depth), controller: s.controller}
	}
	return s
}
