// Package poll waits in tests for a condition that something else makes
// true (a controller, an emulator operation, a server coming up), instead of
// sleeping a guessed time.
package poll

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Interval is how often a condition is looked at.
const Interval = 20 * time.Millisecond

// Until calls cond until it returns "" or timeout passes, then fails the
// test with cond's last word on what it still waits for: a test failing on
// a timeout alone would not say what it was waiting for.
func Until(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	waiting := ""
	err := wait.PollUntilContextTimeout(context.Background(), Interval, timeout, true, func(context.Context) (bool, error) {
		waiting = cond()
		return waiting == "", nil
	})
	if err != nil {
		t.Fatalf("after %s: %s", timeout, waiting)
	}
}
