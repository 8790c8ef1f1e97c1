package typha

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"
)

// BenchmarkFanOut measures one Typha streaming b.N updates to 200 Felix clients over
// loopback TCP, in crumbs of 100 (Typha's batch size). Clients skip update bodies as the
// simulated Felix does. It reports deliveries (updates × clients) per second; allocations
// cover both sides.
func BenchmarkFanOut(b *testing.B) { benchmarkFanOut(b, MaxMessageKVs) }

// BenchmarkFanOutSingleUpdates is BenchmarkFanOut with a crumb per update, as a cluster
// coming up makes them (a pod or a node changing at a time): clients that fall behind
// get the crumbs they missed coalesced.
func BenchmarkFanOutSingleUpdates(b *testing.B) { benchmarkFanOut(b, 1) }

func benchmarkFanOut(b *testing.B, crumbSize int) {
	const clients = 200
	felix := NewCache(nil)
	for i := range 1000 { // a modest existing state, so joining costs a snapshot
		felix.Apply(Update{Kind: "pods", Key: fmt.Sprint("ns/p", i), Revision: "1"})
	}
	felix.SetStatus(InSync)
	caches := map[SyncerType]*Cache{SyncerFelix: felix}
	srv := &Server{Caches: caches}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, l) }()

	cs := make([]*Client, clients)
	for i := range cs {
		cs[i] = &Client{
			Hostname: fmt.Sprint("node-", i),
			Syncer:   SyncerFelix,
			Discover: func(context.Context) ([]Addr, error) { return []Addr{{Addr: l.Addr().String()}}, nil },
		}
		go func() { _ = cs[i].Run(ctx) }()
	}
	waitAll := func(what string, done func(*Client) bool) {
		deadline := time.Now().Add(5 * time.Minute)
		for _, c := range cs {
			for !done(c) {
				if time.Now().After(deadline) {
					b.Fatalf("clients never %s", what)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	waitAll("synced", func(c *Client) bool { return c.NotSynced() == "" })
	base := cs[0].Received()

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	batch := make([]Update, 0, crumbSize)
	for i := range b.N {
		batch = append(batch, Update{Kind: "pods", Key: fmt.Sprint("ns/q", i), Revision: fmt.Sprint(i)})
		if len(batch) == cap(batch) || i == b.N-1 {
			felix.Apply(batch...)
			batch = batch[:0]
		}
	}
	want := base + uint64(b.N)
	waitAll("received every update", func(c *Client) bool { return c.Received() >= want })
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)*clients/elapsed.Seconds(), "deliveries/s")
}
