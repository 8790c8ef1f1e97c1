package arm_test

import (
	"errors"
	"runtime"
	"sync"
	"testing"
)

// failures records Fatal instead of failing the test it wraps.
type failures struct {
	testing.TB
	mu    sync.Mutex
	fatal []string
}

func (f *failures) Helper() {}
func (f *failures) Fatal(args ...any) {
	f.mu.Lock()
	f.fatal = append(f.fatal, "fatal")
	f.mu.Unlock()
	runtime.Goexit()
}

// must fails the test of the goroutine it runs on, not the test that bound
// itself last: with tests in parallel, the other one may be another test.
func TestMustFailsTheTestOfItsGoroutine(t *testing.T) {
	a, b := &failures{TB: t}, &failures{TB: t}
	aBound, bBound := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		bind(a)
		close(aBound)
		<-bBound
		must(0, errors.New("a's call failed"))
	})
	wg.Go(func() {
		<-aBound
		bind(b)
		close(bBound)
	})
	wg.Wait()
	if len(a.fatal) != 1 || len(b.fatal) != 0 {
		t.Fatalf("a failed %d times and b %d times, want a once and b never", len(a.fatal), len(b.fatal))
	}
}
