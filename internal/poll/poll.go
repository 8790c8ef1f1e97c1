// Package poll waits in tests for a condition that something else makes
// true (a controller, an emulator operation, a server coming up), instead of
// sleeping a guessed time.
package poll

import (
	"testing"
	"time"
)

// Interval is how often a condition is looked at.
const Interval = 20 * time.Millisecond

// Until calls cond until it returns "" or timeout passes, then fails the
// test with cond's last word on what it still waits for.
func Until(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		waiting := cond()
		if waiting == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, waiting)
		}
		<-tick.C
	}
}
