package arm_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

// Close lets a request under way end with its answer: it stops taking
// connections at once, and closes the clients' connections only once no
// request is being answered (an HTTP/2 client that keeps its connection
// is not waited for).
func TestCloseAnswersTheRequestsUnderWay(t *testing.T) {
	t.Parallel() // it waits out a request delayed 3 s, alone in its world
	w := newWorld(t, func(o *arm.Options) {
		o.Faults = []arm.Fault{{Method: "GET", Kind: "resourceGroups", Delay: 3 * time.Second}}
	})
	w.group("rg")
	got := make(chan error, 1)
	go func() {
		_, err := w.groups.Get(w.ctx, "rg", nil)
		got <- err
	}()
	poll.Until(t, time.Minute, func() string {
		if w.srv.Counters()["GET resourceGroups"] == 0 {
			return "the GET has not reached the emulator"
		}
		return ""
	})
	closed := make(chan error, 1)
	go func() { closed <- w.srv.Close() }()
	addr := strings.TrimPrefix(w.srv.URL(), "https://")
	poll.Until(t, time.Minute, func() string {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return ""
		}
		c.Close()
		return "the emulator still takes connections after Close began"
	})
	if err := <-got; err != nil {
		t.Fatalf("the request under way when Close began failed: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}
