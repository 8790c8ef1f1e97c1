package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/poll"
)

// watched is the control plane's informer cache, started on the first
// wait that reads through it (Until) and ended by Stop.
type watched struct {
	once  sync.Once
	cache cache.Cache
	err   error
	stop  context.CancelFunc
	done  chan struct{}
}

// Until waits, as poll.Until does, for cond to hold, with cond reading the
// API server through r. While cond does not hold, r is an informer cache of
// the control plane (one watch per kind for the whole package) rather than
// the API server itself: a wait polls every 100 ms for seconds, and those
// reads were about a quarter of all the requests of the controller tests,
// each a quorum read of etcd. Once cond holds in the cache it is asked once
// more with the uncached client, so what the test goes on with is the API
// server's own answer, as before; a condition the API server no longer
// agrees with (the cache was behind a later change) is waited for again.
func (e *Env) Until(tb testing.TB, timeout time.Duration, cond func(r client.Reader) string) {
	tb.Helper()
	r, err := e.watchedReader()
	if err != nil {
		tb.Fatal(err)
	}
	bounded := deadlineReader{r: r, deadline: time.Now().Add(timeout)}
	poll.Until(tb, timeout, func() string {
		if waiting := cond(bounded); waiting != "" {
			return waiting
		}
		return cond(e.Client)
	})
}

// watchedReader starts the cache on first use. It waits for no informer:
// the cache starts each kind's informer on the first read of that kind and
// answers it once that informer has synced.
func (e *Env) watchedReader() (client.Reader, error) {
	w := &e.watched
	w.once.Do(func() {
		c, err := cache.New(e.Config, cache.Options{Scheme: e.Scheme})
		if err != nil {
			w.err = fmt.Errorf("testenv: informer cache: %w", err)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		w.cache, w.stop, w.done = c, cancel, make(chan struct{})
		go func() {
			defer close(w.done)
			if err := c.Start(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "testenv: informer cache:", err)
			}
		}()
	})
	return w.cache, w.err
}

// stopWatched ends the cache's informers, before the API server they
// watch goes.
func (e *Env) stopWatched() {
	if w := &e.watched; w.stop != nil {
		w.stop()
		<-w.done
	}
}

// deadlineReader bounds each read of the cache by the wait's deadline: the
// first read of a kind waits for its informer to sync, and a cond reading
// with context.Background must not outlast the wait that asked.
type deadlineReader struct {
	r        client.Reader
	deadline time.Time
}

func (d deadlineReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	ctx, cancel := context.WithDeadline(ctx, d.deadline)
	defer cancel()
	return d.r.Get(ctx, key, obj, opts...)
}

func (d deadlineReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	ctx, cancel := context.WithDeadline(ctx, d.deadline)
	defer cancel()
	return d.r.List(ctx, list, opts...)
}
