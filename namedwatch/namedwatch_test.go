package namedwatch_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/namedwatch"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e }))
}

// requests counts the API server requests by verb and resource.
type requests struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *requests) get(k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[k]
}

type counting struct {
	rt http.RoundTripper
	r  *requests
}

func (c counting) RoundTrip(req *http.Request) (*http.Response, error) {
	verb := req.Method
	if req.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	} else if req.Method == http.MethodGet && req.URL.Query().Get("fieldSelector") != "" {
		verb = "LIST"
	}
	c.r.mu.Lock()
	c.r.n[verb]++
	c.r.mu.Unlock()
	return c.rt.RoundTrip(req)
}

func namespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "namedwatch-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}) })
	return ns.Name
}

// TestWatchPerName covers the mechanism both the kubelet's ConfigMaps and
// the manager's identity Secrets use, on a real API server: a read starts
// a watch of that one object and later reads cost the API server nothing;
// a change and a deletion are seen; another namespace's object of the same
// name stays apart; beyond Max a read is the caller's (ok false) and opens
// no watch; a watch nothing reads stops.
func TestWatchPerName(t *testing.T) {
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	a, b := namespace(t, admin), namespace(t, admin)
	for _, ns := range []string{a, b} {
		for i := range 3 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"from": ns}}
			if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := &requests{n: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counting{rt, r} })
	cs := kubernetes.NewForConfigOrDie(cfg)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	w := namedwatch.New[*corev1.ConfigMap, *corev1.ConfigMapList](corev1.Resource("configmaps"), cs.CoreV1().ConfigMaps, done, namedwatch.Options{Max: 2, Sync: time.Minute})
	if w.Max() != 2 {
		t.Fatalf("Max() = %d, want 2", w.Max())
	}
	read := func(ns, name string) (string, bool, error) {
		cm, ok, err := w.Get(ctx, ns, name)
		if !ok || err != nil {
			return "", ok, err
		}
		return cm.Data["from"], ok, nil
	}
	if got, ok, err := read(a, "cm-0"); !ok || err != nil || got != a {
		t.Fatalf("first read of %s/cm-0: %q, ok %v, %v; want its data after the first list", a, got, ok, err)
	}
	lists := r.get("LIST")
	for range 20 {
		if got, ok, err := read(a, "cm-0"); !ok || err != nil || got != a {
			t.Fatalf("read %q, ok %v, %v; want %s's ConfigMap", got, ok, err, a)
		}
	}
	if n := r.get("LIST") - lists + r.get("GET"); n != 0 {
		t.Errorf("20 reads of a watched ConfigMap sent %d requests to the API server, want none", n)
	}
	if got, ok, err := read(b, "cm-0"); !ok || err != nil || got != b {
		t.Fatalf("read %q, ok %v, %v from %s; want its own ConfigMap", got, ok, err, b)
	}
	if n := w.Watched(); n != 2 {
		t.Fatalf("%d watches after reading two objects, want 2", n)
	}
	// The cap: a third name is the caller's to read, and opens no watch.
	watches := r.get("WATCH")
	if _, ok, err := read(a, "cm-1"); ok || err != nil {
		t.Fatalf("a read beyond Max: ok %v, %v; want ok false", ok, err)
	}
	if n := w.Watched(); n != 2 {
		t.Errorf("%d watches after a read beyond Max 2", n)
	}
	if n := r.get("WATCH") - watches; n != 0 {
		t.Errorf("a read beyond Max opened %d watches", n)
	}

	cm, err := admin.CoreV1().ConfigMaps(a).Get(ctx, "cm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["from"] = "changed"
	if _, err := admin.CoreV1().ConfigMaps(a).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if got, _, err := read(a, "cm-0"); err != nil || got != "changed" {
			return fmt.Sprintf("waiting for the watch to bring the change: read %q, %v", got, err)
		}
		return ""
	})
	if err := admin.CoreV1().ConfigMaps(a).Delete(ctx, "cm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, ok, err := read(a, "cm-0"); !ok || !apierrors.IsNotFound(err) {
			return fmt.Sprintf("waiting for the deletion to be seen: ok %v, %v", ok, err)
		}
		return ""
	})
}

// TestIdleWatchesStop: a watch no read asks for within Idle is stopped at
// the next read of another object, making room under Max.
func TestIdleWatchesStop(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ns := namespace(t, cs)
	for _, name := range []string{"old", "new"} {
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"k": name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	w := namedwatch.New[*corev1.Secret, *corev1.SecretList](corev1.Resource("secrets"), cs.CoreV1().Secrets, done, namedwatch.Options{Max: 1, Idle: time.Nanosecond, Sync: time.Minute})
	if _, ok, err := w.Get(ctx, ns, "old"); !ok || err != nil {
		t.Fatalf("reading Secret old: ok %v, %v", ok, err)
	}
	// Once "old" has been idle, reading "new" stops its watch and starts
	// its own, although Max is 1.
	poll.Until(t, time.Minute, func() string {
		s, ok, err := w.Get(ctx, ns, "new")
		if !ok || err != nil || string(s.Data["k"]) != "new" {
			return fmt.Sprintf("reading Secret new: ok %v, %v", ok, err)
		}
		return ""
	})
	if n := w.Watched(); n != 1 {
		t.Errorf("%d watches, want 1 (the idle one stopped)", n)
	}
}
