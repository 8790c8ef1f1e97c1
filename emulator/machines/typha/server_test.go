package typha

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"
)

type world struct {
	clock  *fakeClock
	caches map[SyncerType]*Cache
	srv    *Server
	addr   string
}

func startServer(t *testing.T) *world {
	t.Helper()
	w := &world{clock: newFakeClock(), caches: map[SyncerType]*Cache{}}
	for _, st := range AllSyncerTypes {
		w.caches[st] = NewCache(w.clock)
	}
	w.srv = &Server{Caches: w.caches, Clock: w.clock}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.srv.Serve(ctx, l); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// recorder is a client that keeps what it receives.
type recorder struct {
	*Client
	mu  sync.Mutex
	got []Update
	err chan error
}

func (w *world) connect(t *testing.T, name string) *recorder {
	t.Helper()
	r := &recorder{err: make(chan error, 1)}
	r.Client = &Client{
		Hostname: name,
		Syncer:   SyncerFelix,
		Clock:    w.clock,
		Discover: func(context.Context) ([]Addr, error) { return []Addr{{Addr: w.addr}}, nil },
		OnUpdates: func(us []Update) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.got = append(r.got, us...)
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.err <- r.Run(ctx) }()
	t.Cleanup(cancel)
	return r
}

func (r *recorder) updates() []Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Update(nil), r.got...)
}

func TestServerClientsGetSnapshotStatusAndDeltas(t *testing.T) {
	w := startServer(t)
	felix := w.caches[SyncerFelix]
	felix.Apply(pod("a", "1"), pod("b", "2"))
	felix.SetStatus(InSync)

	c1, c2 := w.connect(t, "node-1"), w.connect(t, "node-2")
	for _, c := range []*recorder{c1, c2} {
		eventually(t, func() bool { return c.NotSynced() == "" }, "%s in sync: %s", c.Hostname, c.NotSynced())
	}
	felix.Apply(pod("c", "3"))
	felix.Apply(Update{Kind: "pods", Key: "default/a", Revision: "4", Deleted: true})

	want := []Update{pod("a", "1"), pod("b", "2"), pod("c", "3"), {Kind: "pods", Key: "default/a", Revision: "4", Deleted: true}}
	for _, c := range []*recorder{c1, c2} {
		eventually(t, func() bool { return len(c.updates()) >= len(want) }, "%s receives %d updates", c.Hostname, len(want))
		if got := c.updates(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s received %v, want snapshot then deltas %v", c.Hostname, got, want)
		}
	}
}

func TestServerReadinessNeedsEveryCacheInSync(t *testing.T) {
	w := startServer(t)
	get := func() int {
		rec := httptest.NewRecorder()
		w.srv.Health().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readiness", nil))
		return rec.Code
	}
	for i, st := range AllSyncerTypes {
		if code := get(); code != http.StatusServiceUnavailable {
			t.Fatalf("with %d of 4 caches in sync, /readiness = %d, want 503", i, code)
		}
		w.caches[st].SetStatus(InSync)
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("with every cache in sync, /readiness = %d, want 200", code)
	}
	rec := httptest.NewRecorder()
	w.srv.Health().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/liveness", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/liveness = %d, want 200", rec.Code)
	}
}

func TestServerGovernorDropsOnePerTickDownToTheLimit(t *testing.T) {
	w := startServer(t)
	var cs []*recorder
	for i := range 5 {
		cs = append(cs, w.connect(t, fmt.Sprint("node-", i)))
	}
	eventually(t, func() bool { return w.srv.NumConns() == 5 }, "5 connections (have %d)", w.srv.NumConns())
	w.srv.SetMaxConns(2)
	for range 3 {
		w.clock.tick(t, DefaultDropInterval, 1)
	}
	eventually(t, func() bool { return w.srv.NumConns() == 2 }, "2 connections left (have %d)", w.srv.NumConns())
	exits := make(chan error, len(cs))
	for _, c := range cs {
		go func() { exits <- <-c.err }()
	}
	eventually(t, func() bool { return len(exits) >= 3 }, "3 clients lose their connection (%d did)", len(exits))
	for range 3 {
		if err := <-exits; !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("dropped client ended with %v, want %v", err, ErrConnectionLost)
		}
	}
	w.clock.tick(t, DefaultDropInterval, 1)
	w.clock.tick(t, DefaultDropInterval, 1) // returns once the previous tick was handled
	if n := w.srv.NumConns(); n != 2 || len(exits) != 0 {
		t.Fatalf("ticks at the limit left %d connections and %d more clients exited, want 2 and 0", n, len(exits))
	}
}

func TestServerDropsClientThatDoesNotPong(t *testing.T) {
	w := startServer(t)
	nc, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var fw frameWriter
	fw.hello(Hello{Hostname: "silent", SyncerType: SyncerFelix})
	if _, err := nc.Write(fw.b); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, nc) }() // read, never answer
	eventually(t, func() bool { return w.srv.NumConns() == 1 }, "the silent client connected")

	pongCheck := DefaultPingInterval / 2
	w.clock.tick(t, pongCheck, 1)
	w.clock.tick(t, pongCheck, 1) // the second returns after the first check ran
	if n := w.srv.NumConns(); n != 1 {
		t.Fatalf("a client within the pong timeout was dropped (%d connections)", n)
	}
	w.clock.advance(DefaultPongTimeout + 1)
	w.clock.tick(t, pongCheck, 1)
	eventually(t, func() bool { return w.srv.NumConns() == 0 }, "silent client dropped after the pong timeout")
}

func TestServerKeepsClientThatPongs(t *testing.T) {
	w := startServer(t)
	c := w.connect(t, "node-1")
	eventually(t, func() bool { return w.srv.NumConns() == 1 }, "client connected")
	w.clock.advance(DefaultPongTimeout + 1)
	w.clock.tick(t, DefaultPingInterval, 1)
	first := w.srv.total.Load()
	eventually(t, func() bool { return c.lastPongAfter(w) }, "pong received")
	w.clock.tick(t, DefaultPingInterval/2, 1)
	w.clock.tick(t, DefaultPingInterval/2, 1)
	if n := w.srv.NumConns(); n != 1 || w.srv.total.Load() != first {
		t.Fatalf("a client answering pings lost its connection (%d connections)", n)
	}
}

// lastPongAfter says whether the server saw a pong at the fake clock's current time.
func (r *recorder) lastPongAfter(w *world) bool {
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	for c := range w.srv.conns {
		if c.lastPong.Load() == w.clock.Now().UnixNano() {
			return true
		}
	}
	return false
}

func TestLimit(t *testing.T) {
	for _, tc := range []struct{ typhas, nodes, syncers, want int }{
		{1, 501, 4, 10000},
		{4, 501, 4, 804},
		{2, 4, 4, 400},
		{3, 10000, 4, 10000},
		{7, 1001, 4, 804},
	} {
		if got := Limit(tc.typhas, tc.nodes, tc.syncers); got != tc.want {
			t.Errorf("Limit(%d typhas, %d nodes, %d syncers) = %d, want %d", tc.typhas, tc.nodes, tc.syncers, got, tc.want)
		}
	}
}

func TestRebalanceSetsLimitAndFallsBackOnError(t *testing.T) {
	w := startServer(t)
	var mu sync.Mutex
	typhas, nodes, fail := 4, 501, error(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.srv.Rebalance(ctx, func(context.Context) (int, int, error) {
		mu.Lock()
		defer mu.Unlock()
		return typhas, nodes, fail
	})
	w.clock.tick(t, DefaultPollInterval, 1)
	eventually(t, func() bool { return w.srv.MaxConns() == 804 }, "limit 804 (is %d)", w.srv.MaxConns())
	mu.Lock()
	fail = errors.New("endpoints: forbidden")
	mu.Unlock()
	w.clock.tick(t, DefaultPollInterval, 1)
	eventually(t, func() bool { return w.srv.MaxConns() == DefaultMaxConnsUpper }, "upper limit after an error (is %d)", w.srv.MaxConns())
}

func TestShedClosesConnectionsOneAtATime(t *testing.T) {
	w := startServer(t)
	for i := range 3 {
		w.connect(t, fmt.Sprint("node-", i))
	}
	eventually(t, func() bool { return w.srv.NumConns() == 3 }, "3 connections (have %d)", w.srv.NumConns())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.srv.Shed(context.Background(), DefaultShutdownTimeout, DefaultShutdownMaxDrop)
	}()
	// 300 s × 95 % over 3 connections is 95 s each, capped at 1 s; the ticker runs at 95 % of that.
	every := DefaultShutdownMaxDrop * 95 / 100
	w.clock.tick(t, every, 1)
	w.clock.tick(t, every, 1)
	// A tick is handed over before the drop it brings: wait for that drop.
	eventually(t, func() bool { return w.srv.NumConns() == 1 }, "1 connection left after 2 shedding ticks (have %d)", w.srv.NumConns())
	w.clock.tick(t, every, 1)
	select {
	case <-done:
	case <-time.After(20 * time.Second): // a bound, not a measurement
		t.Fatal("Shed did not return after dropping the last connection")
	}
	if n := w.srv.NumConns(); n != 0 {
		t.Fatalf("Shed returned with %d connections, want 0", n)
	}
}
