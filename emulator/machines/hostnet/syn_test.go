package hostnet

import (
	"slices"
	"testing"
	"time"
)

// The SYN schedules: Linux's gives up after about 127 s (tcp(7)),
// Windows' after 21 s (KB 2786464).
func TestSYNRetransmits(t *testing.T) {
	for _, c := range []struct {
		windows bool
		resend  []time.Duration
		giveUp  time.Duration
	}{
		{false, []time.Duration{time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second, 31 * time.Second, 63 * time.Second}, 127 * time.Second},
		{true, []time.Duration{3 * time.Second, 9 * time.Second}, 21 * time.Second},
	} {
		resend, giveUp := SYNRetransmits(c.windows)
		if !slices.Equal(resend, c.resend) || giveUp != c.giveUp {
			t.Errorf("windows %v: resend at %v, give up at %v; want %v, %v", c.windows, resend, giveUp, c.resend, c.giveUp)
		}
	}
}
