package typha

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"
)

// Felix's side of the connection (felix/daemon/daemon.go, typha/pkg/syncclient/sync_client.go,
// felix/config/config_params.go, calico v3.30.7).
const (
	DefaultConnectGiveUp = 30 * time.Second       // "Failed to connect to Typha, giving up after timeout"
	DefaultReadTimeout   = 30 * time.Second       // TyphaReadTimeout
	DefaultWriteTimeout  = 10 * time.Second       // TyphaWriteTimeout
	DefaultDialTimeout   = 10 * time.Second       // sync_client.go's dial timeout
	DefaultHelloTimeout  = 10 * time.Second       // "Did not get hello message from Typha in time"
	DefaultRetryPause    = 100 * time.Millisecond // between addresses in SyncerClient.Start
	DefaultDiscoverPause = time.Second            // daemon.go's config-loop sleep when discovery fails
)

// Addr is one ready address of the Typha Service's Endpoints.
type Addr struct {
	Addr     string // host:port of the calico-typha port
	NodeName string
}

// Order puts the Typhas on node first and the rest after, each group shuffled
// (typha/pkg/discovery/discovery.go, v3.30.7): a Felix prefers the Typha beside it and
// clients spread evenly otherwise.
func Order(addrs []Addr, node string) []Addr {
	var local, remote []Addr
	for _, a := range addrs {
		if node != "" && a.NodeName == node {
			local = append(local, a)
		} else {
			remote = append(remote, a)
		}
	}
	for _, g := range [][]Addr{local, remote} {
		rand.Shuffle(len(g), func(i, j int) { g[i], g[j] = g[j], g[i] })
	}
	return append(local, remote...)
}

// ErrConnectionLost is Felix's "Connection to Typha failed": once connected, any loss ends
// Felix (its supervisor restarts it).
var ErrConnectionLost = errors.New("connection to Typha failed")

// ErrGaveUp is Felix's fatal "Failed to connect to Typha, giving up after timeout".
var ErrGaveUp = errors.New("failed to connect to Typha, giving up after timeout")

// Client is one Felix's connection to Typha. Run returns when Felix would exit.
type Client struct {
	Hostname string // the node name, also used to prefer the local Typha
	Syncer   SyncerType
	Info     string

	// Discover returns the ready addresses of the Typha Service's Endpoints.
	Discover func(context.Context) ([]Addr, error)
	// Dial connects to an address; nil dials TCP with DefaultDialTimeout.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// OnUpdates receives decoded updates (the slice is reused after it returns); nil skips
	// their bodies, which are only counted.
	OnUpdates func([]Update)
	// OnInSync, when set, is told each time the stream comes into sync
	// (true) and each time it leaves it (false: a status other than
	// InSync, or the connection gone).
	OnInSync func(bool)
	Clock    Clock

	status   atomic.Int32 // SyncStatus + 1; 0 = not connected
	received atomic.Uint64
	attempts atomic.Int64
}

// NotSynced is "" once Typha has said InSync, else why not.
func (c *Client) NotSynced() string {
	v := c.status.Load()
	switch {
	case v == 0:
		return "not connected to Typha"
	case SyncStatus(v-1) != InSync:
		return "Typha syncer status " + SyncStatus(v-1).String()
	}
	return ""
}

// setStatus records the stream's status (SyncStatus + 1; 0 = not
// connected) and tells OnInSync when it comes into or leaves sync.
func (c *Client) setStatus(v int32) {
	in := int32(InSync) + 1
	was := c.status.Swap(v)
	if c.OnInSync != nil && (was == in) != (v == in) {
		c.OnInSync(v == in)
	}
}

// Received is the number of updates read since the client was made.
func (c *Client) Received() uint64 { return c.received.Load() }

// Attempts is the number of dials made.
func (c *Client) Attempts() int { return int(c.attempts.Load()) }

// Run connects and follows the stream until it fails, which is when Felix exits.
//
// Until discovery first finds a ready Typha, Felix redoes its config loop every second and
// never gives up (daemon.go). From then on each round rediscovers and tries the addresses,
// up to twice the Typhas expected (at least 3), DefaultRetryPause apart; rounds repeat, and
// after DefaultConnectGiveUp of failures Run returns ErrGaveUp (daemon.go, SyncerClient.Start
// and calculateConnectionAttemptLimit in sync_client.go). A lost connection returns
// ErrConnectionLost.
func (c *Client) Run(ctx context.Context) error {
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	defer c.setStatus(0)
	for {
		if _, err := c.discover(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	start := c.Clock.Now()
	for {
		nc, err := c.connect(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			err = c.follow(ctx, nc)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: %v", ErrConnectionLost, err)
		}
		if c.Clock.Now().Sub(start) > DefaultConnectGiveUp {
			return fmt.Errorf("%w: %v", ErrGaveUp, err)
		}
	}
}

// discover returns the ready Typhas, or pauses DefaultDiscoverPause after a failure (our
// pause also inside the connect rounds, where upstream's rediscovery has none, so that a
// missing Service does not spin).
func (c *Client) discover(ctx context.Context) ([]Addr, error) {
	addrs, err := c.Discover(ctx)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no ready Typha instances")
	}
	if err != nil {
		select {
		case <-c.Clock.After(DefaultDiscoverPause):
		case <-ctx.Done():
		}
	}
	return addrs, err
}

func (c *Client) connect(ctx context.Context) (net.Conn, error) {
	addrs, err := c.discover(ctx)
	if err != nil {
		return nil, err
	}
	addrs = Order(addrs, c.Hostname)
	tries := 2 * max(len(addrs), 3)
	for i := 0; i < tries; i++ {
		a := addrs[i%len(addrs)]
		nc, derr := c.dial(ctx, a.Addr)
		if derr == nil {
			derr = c.handshake(nc)
		}
		if derr == nil {
			return nc, nil
		}
		err = derr
		select {
		case <-c.Clock.After(DefaultRetryPause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("after %d tries: %w", tries, err)
}

func (c *Client) dial(ctx context.Context, addr string) (net.Conn, error) {
	c.attempts.Add(1)
	if c.Dial != nil {
		return c.Dial(ctx, addr)
	}
	d := net.Dialer{Timeout: DefaultDialTimeout}
	return d.DialContext(ctx, "tcp", addr)
}

// handshake sends the client hello. The server's hello is awaited by follow: its absence
// ends Felix too ("Did not get hello message from Typha in time", daemon.go).
func (c *Client) handshake(nc net.Conn) error {
	var w frameWriter
	w.hello(Hello{Hostname: c.Hostname, SyncerType: c.Syncer, Info: c.Info})
	_ = nc.SetWriteDeadline(time.Now().Add(DefaultWriteTimeout))
	if _, err := nc.Write(w.b); err != nil {
		nc.Close()
		return err
	}
	return nil
}

// follow reads the server hello, the snapshot and the deltas, answering pings, until the
// connection fails or ctx ends.
func (c *Client) follow(ctx context.Context, nc net.Conn) error {
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	r := newFrameReader(nc)
	_ = nc.SetReadDeadline(time.Now().Add(DefaultHelloTimeout))
	if kind, err := r.next(); err != nil {
		return err
	} else if kind != msgServerHello {
		return fmt.Errorf("%w: expected the server hello, got kind %d", errFrame, kind)
	}
	c.setStatus(int32(WaitForDatastore) + 1)
	var batch []Update
	for {
		_ = nc.SetReadDeadline(time.Now().Add(DefaultReadTimeout))
		kind, err := r.next()
		if err != nil {
			return err
		}
		switch kind {
		case msgStatus:
			b, err := r.ReadByte()
			if err != nil {
				return err
			}
			c.setStatus(int32(b) + 1)
		case msgPing:
			t, err := r.varint()
			if err != nil {
				return err
			}
			var w frameWriter
			w.ping(msgPong, t)
			_ = nc.SetWriteDeadline(time.Now().Add(DefaultWriteTimeout))
			if _, err := nc.Write(w.b); err != nil {
				return err
			}
		case msgKVs:
			n, err := r.kvCount()
			if err != nil {
				return err
			}
			c.received.Add(uint64(n))
			if c.OnUpdates == nil {
				continue // next() skips the bodies
			}
			batch = batch[:0]
			for range n {
				u, err := r.update()
				if err != nil {
					return err
				}
				batch = append(batch, u)
			}
			c.OnUpdates(batch)
		default:
			return fmt.Errorf("%w: unexpected kind %d", errFrame, kind)
		}
	}
}
