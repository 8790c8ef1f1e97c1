package typha

import (
	"math/rand/v2"
	"time"
)

// Clock is what the server and client read time from, so tests drive tickers by hand
// instead of sleeping.
type Clock interface {
	Now() time.Time
	// NewTicker fires about every d; stop releases it.
	NewTicker(d time.Duration) (c <-chan time.Time, stop func())
	// After fires once, d from now.
	After(d time.Duration) <-chan time.Time
}

// RealClock is the wall clock. Its tickers are jittered by up to a tenth of their
// interval, as Typha's (typha/pkg/jitter/jittered_ticker.go, used with d/10 for the
// connection governor and the pong check in sync_server.go and for the Kubernetes poll in
// daemon.go, v3.30.7), so that many Typhas do not act in lockstep.
type RealClock struct{}

func (RealClock) Now() time.Time { return time.Now() }

func (RealClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (RealClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	c := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		for {
			t := time.NewTimer(d + rand.N(d/10+1))
			select {
			case now := <-t.C:
				select {
				case c <- now:
				default: // a slow reader misses a tick, as with time.Ticker
				}
			case <-done:
				t.Stop()
				return
			}
		}
	}()
	return c, func() { close(done) }
}
