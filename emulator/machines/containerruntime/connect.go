package containerruntime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/winkube/winkube/emulator/machines/hostnet"
)

// clientDialTimeout is how long client-go's dialer waits for a connect,
// and every program modelled here reaches the API server with client-go
// (k8s.io/client-go@v0.36.3 transport/cache.go: net.Dialer with a 30 s
// Timeout).
const clientDialTimeout = 30 * time.Second

// pendingConnect is a connect whose SYN nothing has answered: what the
// process holds while it waits in it.
type pendingConnect struct {
	addr  string
	since time.Time
	// lost is the first SYN's fate, as the dial reported it.
	lost string
}

// blockedConnect is a dial the process is still waiting in: the program
// waits until its next SYN (or its deadline) and is looked at again then.
type blockedConnect struct {
	addr string
	sent int
	wake time.Duration
}

func (b *blockedConnect) Error() string {
	return fmt.Sprintf("dial tcp %s: connecting: %d SYN(s) sent, none answered yet", b.addr, b.sent)
}

// dial is a simulated process's connect. A SYN that nothing answers (a
// Service IP the node's kube-proxy has not programmed) blocks the process
// as a real connect does: the kernel sends it again on its schedule
// (hostnet.SYNRetransmits), counted from the dial's start, which the
// process keeps while it waits. On Windows a retransmission is forwarded
// once kube-proxy's rules are there (the connect is made then); on Linux
// it follows its connection's first NAT decision and is lost too (see
// kubeproxy's awaitRules). The dial fails with client-go's "i/o timeout"
// at its 30 s deadline, or with "connection timed out" where the kernel
// gives up first (Windows, 21 s). Such a dial returns a *blockedConnect,
// which a program turns into its Waits outcome with blocked. Refusals and
// resets fail at once, as they do.
func (p *Proc) dial(addr string) error {
	if p.Node.Dial == nil {
		return fmt.Errorf("dial tcp %s: no network", addr)
	}
	now := time.Now()
	pending, resumed := p.Memory.(pendingConnect)
	resumed = resumed && pending.addr == addr
	windows := p.Node.OS == "windows"
	if !resumed || windows {
		// The SYN (first or retransmitted) as the node's rules take it
		// now; the process is not held here: its deadline is the
		// simulation's clock, not this call's.
		ctx, cancel := context.WithTimeout(p.Ctx, 0)
		c, err := p.Node.Dial(ctx, addr)
		cancel()
		if err == nil {
			_ = c.Close()
			return nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return err
		}
		if !resumed {
			pending = pendingConnect{addr: addr, since: now, lost: err.Error()}
		}
	}
	elapsed := now.Sub(pending.since)
	resend, giveUp := hostnet.SYNRetransmits(windows)
	switch {
	case giveUp <= clientDialTimeout && elapsed >= giveUp:
		return fmt.Errorf("dial tcp %s: connect: connection timed out", addr)
	case elapsed >= clientDialTimeout:
		return errors.New(pending.lost)
	}
	wake, sent := min(giveUp, clientDialTimeout), 1
	for _, at := range resend {
		if at > elapsed {
			if windows {
				wake = min(wake, at)
			}
			break
		}
		sent++
	}
	p.keep = pending
	return &blockedConnect{addr: addr, sent: sent, wake: max(wake-elapsed, time.Millisecond)}
}

// blocked is the Waits outcome of a process waiting in a connect (dial's
// *blockedConnect); false for any other error.
func blocked(err error) (Outcome, bool) {
	var b *blockedConnect
	if !errors.As(err, &b) {
		return Outcome{}, false
	}
	return waitsEvery(b.wake, "%v", b), true
}
