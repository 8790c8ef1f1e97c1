package typha

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Typha's server (typha/pkg/config/config_params.go and
// typha/pkg/syncserver/sync_server.go, calico v3.30.7).
const (
	DefaultMaxConnsUpper     = 10000            // MaxConnectionsUpperLimit
	DefaultMaxConnsLower     = 400              // MaxConnectionsLowerLimit
	DefaultDropInterval      = time.Second      // ConnectionDropIntervalSecs
	DefaultPingInterval      = 10 * time.Second // ServerPingIntervalSecs
	DefaultPongTimeout       = 60 * time.Second // ServerPongTimeoutSecs
	DefaultHandshakeTimeout  = 10 * time.Second // ServerHandshakeTimeoutSecs
	DefaultMaxFallBehind     = 300 * time.Second
	DefaultMinBatchingAge    = 10 * time.Millisecond // ServerMinBatchingAgeThresholdSecs
	DefaultPollInterval      = 30 * time.Second      // K8sServicePollIntervalSecs
	DefaultShutdownTimeout   = 300 * time.Second     // ShutdownTimeoutSecs
	DefaultShutdownMaxDrop   = time.Second           // ShutdownConnectionDropIntervalMaxSecs
	DefaultHealthPort        = 9098                  // HealthPort
	DefaultServiceName       = "calico-typha"        // K8sServiceName, also the port name
	DefaultServiceNamespace  = "kube-system"         // K8sNamespace
	rebalanceHeadroomPercent = 20
)

// Limit is the number of connections one Typha keeps when typhas share nodes' clients
// (CalculateMaxConnLimit, typha/pkg/k8s/rebalance.go, v3.30.7): a lone Typha takes the
// upper limit; otherwise each node's syncerTypes connections spread over all Typhas but
// one (so one may die in a rolling update) plus 20 % headroom, between the lower and
// upper limits.
func Limit(typhas, nodes, syncerTypes int) int {
	if typhas <= 1 {
		return DefaultMaxConnsUpper
	}
	n := syncerTypes * (1 + nodes*(100+rebalanceHeadroomPercent)/(typhas-1)/100)
	return min(max(n, DefaultMaxConnsLower), DefaultMaxConnsUpper)
}

// Server is one Typha's sync server. Zero durations take Typha's defaults.
type Server struct {
	Caches map[SyncerType]*Cache
	Clock  Clock

	DropInterval     time.Duration
	PingInterval     time.Duration
	PongTimeout      time.Duration
	HandshakeTimeout time.Duration
	MaxFallBehind    time.Duration // also the grace period a new client gets after its snapshot
	// MinBatchingAge: a client whose next crumb is at least this much older than the
	// newest is behind, and gets the deltas of the crumbs it is behind by coalesced
	// (see send).
	MinBatchingAge time.Duration

	initOnce sync.Once
	maxConns atomic.Int64
	mu       sync.Mutex
	conns    map[*conn]struct{}
	total    atomic.Int64 // connections accepted, for tests and metrics
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		if s.Clock == nil {
			s.Clock = RealClock{}
		}
		def := func(d *time.Duration, v time.Duration) {
			if *d <= 0 {
				*d = v
			}
		}
		def(&s.DropInterval, DefaultDropInterval)
		def(&s.PingInterval, DefaultPingInterval)
		def(&s.PongTimeout, DefaultPongTimeout)
		def(&s.HandshakeTimeout, DefaultHandshakeTimeout)
		def(&s.MaxFallBehind, DefaultMaxFallBehind)
		def(&s.MinBatchingAge, DefaultMinBatchingAge)
		if s.maxConns.Load() == 0 {
			s.maxConns.Store(DefaultMaxConnsUpper)
		}
		s.conns = map[*conn]struct{}{}
	})
}

// SetMaxConns sets the connection limit the governor enforces.
func (s *Server) SetMaxConns(n int) {
	s.init()
	s.maxConns.Store(int64(n))
}

// MaxConns is the current connection limit.
func (s *Server) MaxConns() int {
	s.init()
	return int(s.maxConns.Load())
}

// NumConns is the number of live connections.
func (s *Server) NumConns() int {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Serve accepts clients on l until ctx ends, and runs the connection governor: while over
// the limit it drops one random connection per DropInterval tick
// (governNumberOfConnections, sync_server.go, v3.30.7).
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	s.init()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	go s.govern(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		nc, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		c := &conn{s: s, nc: nc, done: make(chan struct{})}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.total.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.handle(ctx)
		}()
	}
}

// onTicks calls f on every tick of a ticker of d until ctx ends or f says
// it is done.
func (s *Server) onTicks(ctx context.Context, d time.Duration, f func() (done bool)) {
	tick, stop := s.Clock.NewTicker(d)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if f() {
				return
			}
		}
	}
}

func (s *Server) govern(ctx context.Context) {
	s.onTicks(ctx, s.DropInterval, func() bool {
		if s.NumConns() > s.MaxConns() {
			s.dropRandom()
		}
		return false
	})
}

// dropRandom closes one connection chosen at random (TerminateRandomConnection) and
// forgets it at once, so the next tick counts without it.
func (s *Server) dropRandom() bool {
	s.mu.Lock()
	var victim *conn
	i := rand.N(max(len(s.conns), 1))
	for c := range s.conns {
		if i == 0 {
			victim = c
			break
		}
		i--
	}
	delete(s.conns, victim)
	s.mu.Unlock()
	if victim == nil {
		return false
	}
	victim.close()
	return true
}

// Rebalance polls count every DefaultPollInterval and sets the limit from it; on an error
// the limit falls back to the upper one, as PollK8sForConnectionLimit does
// (typha/pkg/k8s/rebalance.go, v3.30.7). count gives the ready Typhas of the Service's
// Endpoints and the nodes in the Felix cache.
func (s *Server) Rebalance(ctx context.Context, count func(context.Context) (typhas, nodes int, err error)) {
	s.init()
	s.onTicks(ctx, DefaultPollInterval, func() bool {
		limit := DefaultMaxConnsUpper
		if t, n, err := count(ctx); err == nil && t > 0 && n > 0 {
			limit = Limit(t, n, len(AllSyncerTypes))
		}
		s.SetMaxConns(limit)
		return false
	})
}

// Shed closes the connections one at a time so that clients move to other Typhas
// gradually, over 95 % of timeout and at most maxDrop apart (handleGracefulShutDown,
// sync_server.go, v3.30.7). It returns when none is left or ctx ends.
func (s *Server) Shed(ctx context.Context, timeout, maxDrop time.Duration) {
	s.init()
	n := s.NumConns()
	if n == 0 {
		return
	}
	every := min(timeout*95/100/time.Duration(n), maxDrop)
	s.onTicks(ctx, every*95/100, func() bool {
		left := s.NumConns()
		return !s.dropRandom() || left <= 1 // the last one is gone: Typha completes its shutdown
	})
}

// Health serves /readiness (200 only when every cache is in sync, as each snapcache reports
// ready only then) and /liveness, on Typha's health port 9098.
func (s *Server) Health() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/liveness", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/readiness", func(w http.ResponseWriter, _ *http.Request) {
		for t, c := range s.Caches {
			if st := c.Status(); st != InSync {
				http.Error(w, fmt.Sprintf("%s syncer is %s", t, st), http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	return mux
}

type conn struct {
	s        *Server
	nc       net.Conn
	wmu      sync.Mutex
	once     sync.Once
	done     chan struct{}
	lastPong atomic.Int64 // unix nanos of s.Clock
}

func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		c.nc.Close()
	})
}

func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

// handle runs one client: handshake within HandshakeTimeout, the snapshot at the current
// crumb then every later crumb, and pings with a pong deadline (connection.handle,
// sync_server.go, v3.30.7).
func (c *conn) handle(ctx context.Context) {
	s := c.s
	defer func() {
		c.close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
			c.close()
		case <-c.done:
			cancel()
		}
	}()

	r := newFrameReader(c.nc)
	_ = c.nc.SetReadDeadline(time.Now().Add(s.HandshakeTimeout))
	kind, err := r.next()
	if err != nil || kind != msgHello {
		return
	}
	hello, err := r.hello()
	if err != nil {
		return
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	st := hello.SyncerType
	if st == "" {
		st = SyncerFelix // a client that names no type is an old Felix (doHandshake)
	}
	cache := s.Caches[st]
	if cache == nil {
		return
	}
	var w frameWriter
	w.serverHello(st)
	if c.write(w.b) != nil {
		return
	}

	c.lastPong.Store(s.Clock.Now().UnixNano())
	go c.readPongs(r)
	go c.ping(ctx)
	c.send(ctx, cache)
}

// send writes the snapshot and then each crumb's shared frames. A client more than
// MaxFallBehind behind the newest crumb is dropped once its grace period after the
// snapshot is over. A client behind by MinBatchingAge or more gets the deltas of the
// crumbs it is behind by in one KVs message, until it has caught up or the message holds
// MaxMessageKVs, then the status if it changed: one write where it would have had one per
// crumb (sendDeltaUpdatesToClient, sync_server.go, v3.30.7: it appends each crumb's
// deltas while the crumb's age is at least MinBatchingAgeThreshold and sends them as one
// MsgKVs, then the status only if it differs from the last one sent).
func (c *conn) send(ctx context.Context, cache *Cache) {
	s := c.s
	crumb, snap := cache.Join()
	if c.write(snap) != nil {
		return
	}
	sent := crumb.Status // the snapshot ends with it
	graceEnd := s.Clock.Now().Add(s.MaxFallBehind)
	// next moves to the crumb after crumb and says how far behind the newest it is;
	// false: the connection ends (ctx done, or the client fell too far behind).
	next := func() (time.Duration, bool) {
		n, err := crumb.Next(ctx)
		if err != nil {
			return 0, false
		}
		crumb = n
		age := cache.Current().Time.Sub(crumb.Time)
		return age, age <= s.MaxFallBehind || !s.Clock.Now().After(graceEnd)
	}
	for {
		age, ok := next()
		if !ok {
			return
		}
		// A crumb sent alone (the client keeps up, or the crumb fills a message) goes
		// out as its shared frames; coalesced crumbs are encoded for this client.
		first, deltas := crumb, slices.Clip(crumb.Deltas) // appends copy, never into the crumb
		for age >= s.MinBatchingAge && len(deltas) < MaxMessageKVs {
			if age, ok = next(); !ok {
				return
			}
			deltas = append(deltas, crumb.Deltas...)
		}
		b := crumb.Frames()
		if crumb != first {
			var w frameWriter
			w.kvs(deltas)
			if crumb.Status != sent {
				w.status(crumb.Status)
			}
			b = w.b
		}
		sent = crumb.Status
		if len(b) > 0 && c.write(b) != nil {
			return
		}
	}
}

func (c *conn) ping(ctx context.Context) {
	s := c.s
	pingTick, stopPing := s.Clock.NewTicker(s.PingInterval)
	defer stopPing()
	pongTick, stopPong := s.Clock.NewTicker(s.PingInterval / 2)
	defer stopPong()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pingTick:
			var w frameWriter
			w.ping(msgPing, s.Clock.Now().UnixNano())
			if c.write(w.b) != nil {
				c.close()
				return
			}
		case now := <-pongTick: // the tick's own time, so a test's clock cannot move under it
			if now.Sub(time.Unix(0, c.lastPong.Load())) > s.PongTimeout {
				c.close() // "Too long since last pong from client, disconnecting"
				return
			}
		}
	}
}

func (c *conn) readPongs(r *frameReader) {
	defer c.close()
	for {
		kind, err := r.next()
		if err != nil || kind != msgPong {
			return // the only message a client sends after its hello is a pong
		}
		c.lastPong.Store(c.s.Clock.Now().UnixNano())
	}
}
