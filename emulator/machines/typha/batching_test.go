package typha

import (
	"context"
	"io"
	"net"
	"reflect"
	"testing"
	"time"
)

// trickle hands its reader's bytes over one at a time: over a synchronous pipe the
// server's write of a frame is still under way until the frame's last byte is read.
type trickle struct{ r io.Reader }

func (t trickle) Read(p []byte) (int, error) { return t.r.Read(p[:min(len(p), 1)]) }

// A client that is behind gets the crumbs it missed in one KVs message, then the status
// once, as Typha's sendDeltaUpdatesToClient coalesces them; a client that keeps up gets
// each crumb as it comes.
func TestBehindClientGetsCrumbsCoalesced(t *testing.T) {
	clock := newFakeClock()
	cache := NewCache(clock)
	cache.SetStatus(ResyncInProgress)
	srv := &Server{Caches: map[SyncerType]*Cache{SyncerFelix: cache}, Clock: clock}
	srv.init()
	server, client := net.Pipe()
	defer client.Close()
	c := &conn{s: srv, nc: server, done: make(chan struct{})}
	defer c.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.send(ctx, cache)

	r := newFrameReader(trickle{client})
	_ = client.SetReadDeadline(time.Now().Add(time.Minute))
	status := func(want SyncStatus) {
		t.Helper()
		if kind, err := r.next(); err != nil || kind != msgStatus {
			t.Fatalf("want a status frame, got kind %d, %v", kind, err)
		}
		if b, err := r.ReadByte(); err != nil || SyncStatus(b) != want {
			t.Fatalf("status %d, %v; want %s", b, err, want)
		}
	}
	kvs := func(want ...Update) {
		t.Helper()
		n, err := r.kvCount()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]Update, 0, n)
		for range n {
			u, err := r.update()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, u)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("KVs message %v, want %v", got, want)
		}
	}
	pod := func(name string) Update { return Update{Kind: "pods", Key: "ns/" + name, Revision: "1"} }

	status(ResyncInProgress) // the snapshot: no keys yet, then the status

	// Up to date: the crumb alone. Once its frame has begun to arrive, the server has
	// already decided to send it alone.
	cache.Apply(pod("a"))
	if kind, err := r.next(); err != nil || kind != msgKVs {
		t.Fatalf("want the KVs of pod a, got kind %d, %v", kind, err)
	}
	// While that write is under way, three more crumbs a second apart: the first two are
	// 2 s and 1 s older than the newest when the server comes to them.
	clock.advance(time.Second)
	cache.Apply(pod("b"))
	clock.advance(time.Second)
	cache.SetStatus(InSync)
	clock.advance(time.Second)
	cache.Apply(pod("d"))
	kvs(pod("a"))

	if kind, err := r.next(); err != nil || kind != msgKVs {
		t.Fatalf("want one KVs message for the crumbs missed, got kind %d, %v", kind, err)
	}
	kvs(pod("b"), pod("d"))
	status(InSync)

	// Caught up again: the next crumb comes as it is.
	cache.Apply(pod("e"))
	if kind, err := r.next(); err != nil || kind != msgKVs {
		t.Fatalf("want the KVs of pod e, got kind %d, %v", kind, err)
	}
	kvs(pod("e"))
}
