package testenv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// StartManager runs mgr until the returned stop is called, and returns once
// every runnable of the manager has started (its caches synced, its
// webhook server and controllers running); stop ends it and waits until it
// has, and may be called more than once.
//
// The wait is what makes stop safe. In controller-runtime v0.24.1 a runnable
// group's start loop does not return when its context is cancelled: the
// ctx.Done case fires again at once, and the loop spins until every runnable
// of the group has said it is ready (pkg/manager/runnable_group.go Start;
// reported in kubernetes-sigs/controller-runtime#3440). A cache that can no
// longer sync (Env.Stop kills the API server first) never says so: the
// goroutine spins a core for good, and the manager's Start never returns. A
// package whose tests all skip stopped its webhook manager that early, and
// hung at 100 % CPU. With no leader election the manager closes Elected once
// its last group has started (pkg/manager/internal.go Start), so after
// Elected no group is left in that loop.
func StartManager(mgr ctrl.Manager) (stop func() error, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	select {
	case <-mgr.Elected():
		return sync.OnceValue(func() error { cancel(); return <-done }), nil
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("testenv: the manager ended before it had started: %w", err)
	case <-time.After(2 * time.Minute):
		// Cancelled now, the manager would spin as described above: it
		// is left running, and the caller fails.
		_ = cancel
		return nil, errors.New("testenv: the manager's runnables had not all started after 2m")
	}
}

// RunManager is StartManager for a test: it fails tb if mgr cannot start,
// and stops mgr when tb ends.
func RunManager(tb testing.TB, mgr ctrl.Manager) {
	tb.Helper()
	stop, err := StartManager(mgr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Errorf("manager: %v", err)
		}
	})
}
