package typha

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/poll"
)

// fakeClock's tickers fire only when a test ticks them; After advances the clock by its
// duration and fires at once, so retry pauses cost no wall time.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers map[time.Duration][]chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_800_000_000, 0), tickers: map[time.Duration][]chan time.Time{}}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.advance(d)
	c := make(chan time.Time, 1)
	c <- f.Now()
	return c
}

func (f *fakeClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	c := make(chan time.Time)
	f.mu.Lock()
	f.tickers[d] = append(f.tickers[d], c)
	f.mu.Unlock()
	return c, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.tickers[d] {
			if x == c {
				f.tickers[d] = append(f.tickers[d][:i], f.tickers[d][i+1:]...)
				return
			}
		}
	}
}

// tick waits until want tickers of interval d exist, then delivers one tick to each; a
// send returns once the owner has received it.
func (f *fakeClock) tick(t *testing.T, d time.Duration, want int) {
	t.Helper()
	var cs []chan time.Time
	eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		cs = append([]chan time.Time(nil), f.tickers[d]...)
		return len(cs) >= want
	}, "%d tickers of %v", want, d)
	for _, c := range cs {
		select {
		case c <- f.Now():
		case <-time.After(10 * time.Second):
			t.Fatalf("nobody received a tick of %v", d)
		}
	}
}

// eventually waits for cond with the project's poll.Until; it bounds a
// wait, it does not measure one.
func eventually(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	poll.Until(t, 20*time.Second, func() string {
		if cond() {
			return ""
		}
		return fmt.Sprintf("never true: "+format, args...)
	})
}
