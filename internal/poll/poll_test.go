package poll

import (
	"fmt"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	Until(t, time.Second, func() string {
		if n++; n < 3 {
			return fmt.Sprintf("call %d", n)
		}
		return ""
	})
	if n != 3 {
		t.Fatalf("condition called %d times, want 3", n)
	}
}

// recorder catches the failure Until reports.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

func TestUntilFailsWithTheLastReason(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		Until(r, 50*time.Millisecond, func() string { return "still waiting" })
	}()
	if r.failed != "after 50ms: still waiting" {
		t.Fatalf("failure %q", r.failed)
	}
}
