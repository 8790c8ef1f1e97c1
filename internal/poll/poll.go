// Package poll waits in tests for a condition that something else makes
// true (a controller, an emulator operation, a server coming up), instead of
// sleeping a guessed time.
package poll

import (
	"testing"
	"time"
)

// Interval is how soon a condition is looked at again after its first
// look; each later look waits half as long again as the one before, up to
// MaxInterval.
const Interval = 20 * time.Millisecond

// MaxInterval bounds the wait between two looks. Conditions are mostly read
// through an uncached client, each look a read from etcd: a fixed 20 ms made
// a test waiting seconds for a controller read the API server 50 times a
// second, which in the envtest packages was a good part of the API server's
// CPU. Growing to 100 ms costs a condition that holds late at most that long.
const MaxInterval = 100 * time.Millisecond

// Until calls cond until it returns "" or timeout passes, then fails the
// test with cond's last word on what it still waits for: a test failing on
// a timeout alone would not say what it was waiting for.
func Until(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for interval := Interval; ; interval = min(interval*3/2, MaxInterval) {
		waiting := cond()
		if waiting == "" {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("after %s: %s", timeout, waiting)
		}
		time.Sleep(min(interval, left))
	}
}
