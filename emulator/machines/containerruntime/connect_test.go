package containerruntime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestConnectBeforeTheRules: a process's connect to a Service IP its
// node has not programmed waits in its SYN's retransmissions, holding
// the connect's start between looks. On Linux the connection keeps its
// first NAT decision and fails at client-go's 30 s deadline even after
// the rules come; on Windows the first retransmission after the rules
// connects, and the kernel gives up at 21 s.
func TestConnectBeforeTheRules(t *testing.T) {
	const addr = "10.96.0.1:443"
	for _, c := range []struct {
		os string
		// firstWake is when the process is looked at again after its
		// first SYN: Linux at its deadline, Windows at the first
		// retransmission.
		firstWake time.Duration
		// connects says whether a look after the rules came connects.
		connects bool
		// lastFailure is the dial's end when nothing answers.
		lastAt      time.Duration
		lastFailure string
	}{
		{"linux", 30 * time.Second, false, 30 * time.Second, "i/o timeout (no kube-proxy has programmed"},
		{"windows", 3 * time.Second, true, 21 * time.Second, "connect: connection timed out"},
	} {
		t.Run(c.os, func(t *testing.T) {
			programmed, dials := false, 0
			node := Node{OS: c.os, Dial: func(ctx context.Context, a string) (net.Conn, error) {
				dials++
				if programmed {
					client, server := net.Pipe()
					server.Close()
					return client, nil
				}
				<-ctx.Done() // the caller's deadline, as kube-proxy's awaitRules waits for it
				return nil, fmt.Errorf("dial tcp %s: %w (no kube-proxy has programmed Service default/kubernetes)", a, os.ErrDeadlineExceeded)
			}}
			look := func(memory any) (*Proc, error) {
				p := &Proc{Ctx: context.Background(), Node: node, Memory: memory}
				return p, p.dial(addr)
			}

			start := time.Now()
			p, err := look(nil)
			o, ok := blocked(err)
			if !ok || o.State != Waits {
				t.Fatalf("the first SYN lost: %v; want the process waiting in its connect", err)
			}
			if o.Every < c.firstWake-time.Second || o.Every > c.firstWake {
				t.Errorf("looked at again in %s; want about %s", o.Every, c.firstWake)
			}
			held := p.keep
			if held == nil {
				t.Fatal("the waiting process holds nothing of its connect")
			}

			// The rules come; the process is looked at after its first
			// retransmission (the connect's start moved back to stand for
			// the time).
			programmed = true
			before := dials
			_, err = look(shift(held, -4*time.Second))
			if c.connects && err != nil {
				t.Fatalf("a retransmission after the rules: %v; want connected", err)
			}
			if !c.connects {
				if _, ok := blocked(err); !ok {
					t.Fatalf("a Linux retransmission after the rules: %v; want still waiting (its first NAT decision holds)", err)
				}
				if dials != before {
					t.Error("a Linux retransmission asked the node's rules again")
				}
			}

			// Nothing ever answers: the dial's end.
			programmed = false
			_, err = look(shift(held, -c.lastAt))
			if _, ok := blocked(err); ok || err == nil || !strings.Contains(err.Error(), c.lastFailure) {
				t.Fatalf("at %s: %v; want %q", c.lastAt, err, c.lastFailure)
			}

			// Another address is another connect: the memory is not its.
			_, err = look(pendingConnect{addr: "10.96.0.10:53", since: start.Add(-time.Hour), lost: "x"})
			if _, ok := blocked(err); !ok {
				t.Fatalf("a connect to another address: %v; want it to wait on its own", err)
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		p := &Proc{Ctx: context.Background(), Node: Node{OS: "linux", Dial: func(context.Context, string) (net.Conn, error) {
			return nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
		}}}
		if err := p.dial(addr); err == nil || strings.Contains(err.Error(), "SYN") || p.keep != nil {
			t.Fatalf("a refusal: %v (holds %v); want it at once", err, p.keep)
		}
	})
}

func shift(m any, d time.Duration) any {
	pc := m.(pendingConnect)
	pc.since = pc.since.Add(d)
	return pc
}
