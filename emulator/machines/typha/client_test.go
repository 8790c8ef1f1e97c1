package typha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
)

func TestOrderPutsLocalTyphasFirst(t *testing.T) {
	addrs := []Addr{{"10.0.0.1:5473", "a"}, {"10.0.0.2:5473", "b"}, {"10.0.0.3:5473", "me"}, {"10.0.0.4:5473", "c"}, {"10.0.0.5:5473", "me"}}
	firstRemote := map[string]bool{}
	for range 200 {
		got := Order(append([]Addr(nil), addrs...), "me")
		if len(got) != len(addrs) || got[0].NodeName != "me" || got[1].NodeName != "me" {
			t.Fatalf("Order = %v, want the two Typhas on node me first", got)
		}
		firstRemote[got[2].NodeName] = true
	}
	if len(firstRemote) < 2 {
		t.Fatalf("remote Typhas always in the same order (first was only %v): not shuffled", firstRemote)
	}
}

func TestClientDialsItsNodesTyphaFirst(t *testing.T) {
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		var first string
		c := &Client{
			Hostname: "me",
			Syncer:   SyncerFelix,
			Clock:    newFakeClock(),
			Discover: func(context.Context) ([]Addr, error) {
				return []Addr{{"10.0.0.1:5473", "a"}, {"10.0.0.2:5473", "b"}, {"10.0.0.9:5473", "me"}}, nil
			},
			Dial: func(_ context.Context, addr string) (net.Conn, error) {
				if first == "" {
					first = addr
				}
				cancel()
				return nil, errors.New("unreachable")
			},
		}
		if err := c.Run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		if first != "10.0.0.9:5473" {
			t.Fatalf("first dial went to %s, want the local Typha 10.0.0.9:5473", first)
		}
	}
}

func TestClientGivesUpAfterFailingToConnect(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	c := &Client{
		Hostname: "me",
		Syncer:   SyncerFelix,
		Clock:    clock,
		Discover: func(context.Context) ([]Addr, error) {
			return []Addr{{"10.0.0.1:5473", "a"}, {"10.0.0.2:5473", "b"}}, nil
		},
		Dial: func(context.Context, string) (net.Conn, error) { return nil, errors.New("connection refused") },
	}
	err := c.Run(context.Background())
	if !errors.Is(err, ErrGaveUp) {
		t.Fatalf("Run = %v, want %v", err, ErrGaveUp)
	}
	// Each round tries 2*max(2,3) = 6 addresses 100 ms apart; Felix gives up only once a
	// round ends more than 30 s after it started.
	if n := c.Attempts(); n%6 != 0 || clock.Now().Sub(start) <= DefaultConnectGiveUp {
		t.Fatalf("gave up after %d dials and %v, want whole rounds of 6 and over %v", n, clock.Now().Sub(start), DefaultConnectGiveUp)
	}
	if c.NotSynced() == "" {
		t.Fatal("a client that never connected reports in sync")
	}
}

func TestClientRediscoversEverySecondUntilATyphaIsReady(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	c := &Client{
		Hostname: "me",
		Syncer:   SyncerFelix,
		Clock:    clock,
		Discover: func(context.Context) ([]Addr, error) {
			calls++
			if calls == 100 {
				cancel()
			}
			return nil, nil // Endpoints with no ready address yet
		},
	}
	// Felix's config loop never gives up waiting for a first Typha: 100 discoveries 1 s
	// apart end only because the test stops it.
	if err := c.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want it to keep waiting until cancelled", err)
	}
	if d := clock.Now().Sub(start); d != 100*DefaultDiscoverPause || c.Attempts() != 0 {
		t.Fatalf("100 discoveries took %v and %d dials, want %v and none", d, c.Attempts(), 100*DefaultDiscoverPause)
	}
}

func TestClientExitsWhenTyphaCloses(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		r := newFrameReader(nc)
		if k, err := r.next(); err != nil || k != msgHello {
			nc.Close()
			return
		}
		var w frameWriter
		w.serverHello(SyncerFelix)
		w.status(InSync)
		_, _ = nc.Write(w.b)
		nc.Close() // Typha's pod goes away
	}()
	var told []bool
	c := &Client{
		Hostname: "me",
		Syncer:   SyncerFelix,
		Clock:    newFakeClock(),
		Discover: func(context.Context) ([]Addr, error) { return []Addr{{Addr: l.Addr().String()}}, nil },
		OnInSync: func(in bool) { told = append(told, in) },
	}
	if err := c.Run(context.Background()); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("Run = %v, want %v", err, ErrConnectionLost)
	}
	if c.NotSynced() == "" {
		t.Fatal("after losing Typha the client still reports in sync")
	}
	// Felix's routes outlive it only if the runtime hears both ends of
	// its time in sync.
	if fmt.Sprint(told) != "[true false]" {
		t.Errorf("OnInSync was told %v, want [true false]: in sync, then the connection lost", told)
	}
}
