package startneeds

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/winkube/winkube/internal/poll"
)

// spentBucket lets Burst requests through and then none: a session that
// syncs through it needs no token that only time would bring back.
type spentBucket struct {
	left atomic.Int64
	qps  float32
}

func (b *spentBucket) TryAccept() bool { return b.left.Add(-1) >= 0 }
func (b *spentBucket) Accept()         { select {} }
func (b *spentBucket) Stop()           {}
func (b *spentBucket) QPS() float32    { return b.qps }
func (b *spentBucket) Wait(ctx context.Context) error {
	if b.TryAccept() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestFelixStartsWithinItsBurst: Felix's syncer lists and watches about
// 25 kinds at once; with its own client's burst (Calico's, not
// client-go's 10) every list goes out without waiting for a token, so
// Felix is in sync, and its readiness probe passes, as soon as the API
// server has answered.
func TestFelixStartsWithinItsBurst(t *testing.T) {
	env := apiServer.Env(t)
	prev := newLimiter
	newLimiter = func(qps float32, burst int) flowcontrol.RateLimiter {
		b := &spentBucket{qps: qps}
		b.left.Store(int64(burst))
		return b
	}
	defer func() { newLimiter = prev }()
	for _, name := range []string{"calico-node", "calico-node-windows"} {
		t.Run(name, func(t *testing.T) { felixSyncsWithinItsBurst(t, env.Config, name) })
	}
}

func felixSyncsWithinItsBurst(t *testing.T, cfg *rest.Config, name string) {
	var felix *Component
	for _, c := range Catalog() {
		if c.Name == name {
			felix = &c
		}
	}
	if felix == nil {
		t.Fatalf("no %s in the catalog", name)
	}
	burst := felix.Client.Burst
	if burst == 0 {
		burst = 10 // client-go's default
	}
	s, err := StartSession(SessionConfig{Config: cfg, Node: "n", Watches: felix.Watches, Sync: felix.Sync, Client: felix.Client})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	poll.Until(t, 2*time.Minute, func() string {
		if ns := s.NotSynced(); ns != "" {
			return fmt.Sprintf("%s: Felix is not in sync within a burst of %d requests: %s", name, burst, ns)
		}
		return ""
	})
}
