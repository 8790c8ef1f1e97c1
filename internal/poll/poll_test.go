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

// TestUntilLooksLessOftenAsItWaits: a condition that holds late is looked
// at with growing gaps, not 50 times a second; a slow machine only makes
// the gaps longer, so the bound holds under load too.
func TestUntilLooksLessOftenAsItWaits(t *testing.T) {
	r := &recorder{TB: t}
	looks := 0
	func() {
		defer func() { _ = recover() }()
		Until(r, time.Second, func() string { looks++; return "not yet" })
	}()
	if r.failed == "" {
		t.Fatal("Until returned without the condition holding")
	}
	// 20, 30, 45, 67, then 100 ms gaps: 13 looks in a second. A fixed
	// 20 ms would look 51 times.
	if looks > 20 {
		t.Fatalf("looked %d times in a second, want at most 20", looks)
	}
}
