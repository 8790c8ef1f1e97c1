package typha

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// SyncerType names one of Typha's pipelines (sync_proto.go, calico v3.30.7).
type SyncerType string

const (
	SyncerFelix              SyncerType = "felix"
	SyncerBGP                SyncerType = "bgp"
	SyncerTunnelIPAllocation SyncerType = "tunnel-ip-allocation"
	SyncerNodeStatus         SyncerType = "node-status"
)

// AllSyncerTypes are the four caches one Typha serves (typha/pkg/daemon/daemon.go, v3.30.7);
// their number enters the connection limit.
var AllSyncerTypes = []SyncerType{SyncerFelix, SyncerBGP, SyncerTunnelIPAllocation, SyncerNodeStatus}

// SyncStatus is a syncer's state as libcalico-go's api.SyncStatus reports it.
type SyncStatus uint8

const (
	WaitForDatastore SyncStatus = iota
	ResyncInProgress
	InSync
)

func (s SyncStatus) String() string {
	switch s {
	case WaitForDatastore:
		return "wait-for-datastore"
	case ResyncInProgress:
		return "resync-in-progress"
	case InSync:
		return "in-sync"
	}
	return "unknown"
}

// Update is one datastore change: which object and at which revision. Bodies are not
// carried: the simulated Felix acts on sync state, not on object contents.
type Update struct {
	Kind, Key, Revision string
	Deleted             bool
}

// Crumb is one breadcrumb of the cache: the updates since the previous one and the sync
// status after them (snapcache.Breadcrumb, typha/pkg/snapcache/cache.go, v3.30.7). A crumb
// never changes once published; Next blocks until its successor exists.
type Crumb struct {
	Seq    uint64
	Time   time.Time
	Deltas []Update
	Status SyncStatus

	statusChanged bool
	next          *Crumb
	ready         chan struct{} // closed when next is set

	encodeOnce sync.Once
	frames     []byte
	snapshot   []byte // the state at this crumb, encoded once for every client joining here
}

// Next waits for the crumb after c.
func (c *Crumb) Next(ctx context.Context) (*Crumb, error) {
	select {
	case <-c.ready:
		return c.next, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Frames is c's deltas (and its status if it changed) encoded once and shared by every
// connection that reaches c, as Typha serializes each update once in its cache.
func (c *Crumb) Frames() []byte {
	c.encodeOnce.Do(func() {
		var w frameWriter
		w.kvs(c.Deltas)
		if c.statusChanged {
			w.status(c.Status)
		}
		c.frames = w.b
	})
	return c.frames
}

// Cache holds one syncer type's current state as a chain of crumbs.
type Cache struct {
	clock Clock

	mu     sync.Mutex
	state  map[string]Update // by kind + "/" + key
	counts map[string]int    // live keys by kind
	cur    *Crumb
}

// NewCache starts a cache in WaitForDatastore with an empty first crumb.
func NewCache(clock Clock) *Cache {
	if clock == nil {
		clock = RealClock{}
	}
	return &Cache{
		clock:  clock,
		state:  map[string]Update{},
		counts: map[string]int{},
		cur:    &Crumb{Time: clock.Now(), ready: make(chan struct{})},
	}
}

// Apply records a batch of updates as one new crumb. Typha drains whatever its syncer has
// queued, up to SnapshotCacheMaxBatchSize (100) items, into one breadcrumb (cache.go
// fillBatchFromInputQueue, v3.30.7); callers pass such batches.
func (c *Cache) Apply(us ...Update) {
	if len(us) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, u := range us {
		k := u.Kind + "/" + u.Key
		_, had := c.state[k]
		switch {
		case u.Deleted && had:
			delete(c.state, k)
			c.counts[u.Kind]--
		case !u.Deleted:
			if !had {
				c.counts[u.Kind]++
			}
			c.state[k] = u
		}
	}
	c.publish(slices.Clone(us), c.cur.Status)
}

// SetStatus records the syncer's status; a change becomes a crumb of its own, which is how
// clients learn they are in sync.
func (c *Cache) SetStatus(s SyncStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == c.cur.Status {
		return
	}
	c.publish(nil, s)
}

func (c *Cache) publish(deltas []Update, s SyncStatus) {
	prev := c.cur
	n := &Crumb{
		Seq:           prev.Seq + 1,
		Time:          c.clock.Now(),
		Deltas:        deltas,
		Status:        s,
		statusChanged: s != prev.Status,
		ready:         make(chan struct{}),
	}
	c.cur = n
	prev.next = n
	close(prev.ready)
}

// Current is the newest crumb.
func (c *Cache) Current() *Crumb {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Status is the newest crumb's status; Typha reports ready only when it is InSync
// (cache.go reportHealth, v3.30.7).
func (c *Cache) Status() SyncStatus { return c.Current().Status }

// Count is how many keys of kind the cache holds (Typha counts nodes from its Felix cache
// for rebalancing, typha/pkg/calc/node_counter.go, v3.30.7).
func (c *Cache) Count(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[kind]
}

// Join returns the newest crumb and the encoded state at it (every key, then the status),
// encoded once per crumb however many clients join there.
func (c *Cache) Join() (*Crumb, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.cur
	if cur.snapshot == nil {
		var w frameWriter
		w.kvs(c.sortedState())
		w.status(cur.Status)
		cur.snapshot = w.b
	}
	return cur, cur.snapshot
}

// State is the current state, sorted by kind and key.
func (c *Cache) State() []Update {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sortedState()
}

func (c *Cache) sortedState() []Update {
	us := make([]Update, 0, len(c.state))
	for _, u := range c.state {
		us = append(us, u)
	}
	slices.SortFunc(us, func(a, b Update) int {
		if d := strings.Compare(a.Kind, b.Kind); d != 0 {
			return d
		}
		return strings.Compare(a.Key, b.Key)
	})
	return us
}
