package hostnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/winkube/winkube/localports"
)

// Distribution is how a load-balancing rule picks a backend for a new
// connection: a hash over the connection's tuple, as Azure Load Balancer's
// distribution modes do.
type Distribution string

const (
	// Default hashes the 5-tuple: source and destination address and
	// port, and protocol. Connections from one client spread.
	Default Distribution = "Default"
	// SourceIP hashes the 2-tuple (source and destination address): a
	// client stays on one backend while the backends' health is unchanged.
	SourceIP Distribution = "SourceIP"
	// SourceIPProtocol hashes the 3-tuple (addresses and protocol).
	SourceIPProtocol Distribution = "SourceIPProtocol"
)

// Probe is a health probe of a rule's backends.
type Probe struct {
	// Protocol is Tcp (a connection must be accepted), Http or Https (a GET
	// of Path must answer 200).
	Protocol string
	// Port is probed on each backend's host address.
	Port     int
	Path     string
	Interval time.Duration
	// Threshold is how many consecutive failures take a backend out of
	// rotation; one success puts it back. A backend starts out of rotation
	// until its first probe succeeds.
	Threshold int
}

// Rule is one load-balancing rule's frontend: connections to Frontend go
// to one of the Backends in rotation.
type Rule struct {
	// Frontend is host:port to listen on.
	Frontend string
	// Backends are host:port to forward to.
	Backends []string
	// Probe is nil for a rule without one: every backend takes connections.
	Probe        *Probe
	Distribution Distribution
	// IdleTimeout closes a connection without traffic either way for that
	// long; zero means never.
	IdleTimeout time.Duration
	// Admit, when set, says whether a connection from src may reach
	// backend (host:port): the network security groups in front of it. A
	// connection it refuses is reset: Azure drops the flow's packets and
	// the client times out; the local network has already accepted the
	// connection, so it closes it at once with a reset, and the client
	// never reaches an application either way.
	Admit func(backend string, src netip.Addr) bool
	// ProbeAdmit, when set, says whether the health probe of backend's
	// probe target (host:port) gets through the same network security
	// groups; a probe it refuses fails.
	ProbeAdmit func(target string) bool
}

// lbFrontend is a rule's listener and its backends' health.
type lbFrontend struct {
	ln     net.Listener
	mu     sync.Mutex
	rule   Rule
	health map[string]*prober // by backend (host:port)
}

// SetRules makes the network's load-balancing rules what rules says: new
// frontends listen, gone ones stop, changed ones take their new backends
// and probes (a backend whose probe is unchanged keeps its health). It
// returns the frontends that could not listen. The inbound NAT frontends
// of AddBackend are not affected.
func (n *Network) SetRules(rules []Rule) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.rules == nil {
		n.rules = map[string]*lbFrontend{}
	}
	want := map[string]Rule{}
	for _, r := range rules {
		want[r.Frontend] = r
	}
	for front, f := range n.rules {
		if _, ok := want[front]; !ok {
			f.close()
			delete(n.rules, front)
		}
	}
	var errs []error
	for front, r := range want {
		f, ok := n.rules[front]
		if !ok {
			ln, err := localports.Listen(front)
			if err != nil {
				errs = append(errs, fmt.Errorf("load balancer frontend %s: %w", front, err))
				continue
			}
			f = &lbFrontend{ln: ln, health: map[string]*prober{}}
			n.rules[front] = f
			go f.serve()
		}
		f.update(r)
	}
	return errors.Join(errs...)
}

// InRotation lists the backends of a rule's frontend that take new
// connections now.
func (n *Network) InRotation(front string) []string {
	n.mu.Lock()
	f := n.rules[front]
	n.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.inRotation()
}

func (n *Network) closeRules() {
	for front, f := range n.rules {
		f.close()
		delete(n.rules, front)
	}
}

func (f *lbFrontend) update(r Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	probeChanged := !reflect.DeepEqual(f.rule.Probe, r.Probe)
	keep := map[string]bool{}
	for _, b := range r.Backends {
		keep[b] = true
	}
	for b, p := range f.health {
		if !keep[b] || probeChanged {
			p.stop()
			delete(f.health, b)
		}
	}
	if r.Probe != nil {
		for _, b := range r.Backends {
			if _, ok := f.health[b]; !ok {
				host, _, err := net.SplitHostPort(b)
				if err != nil {
					continue
				}
				target := net.JoinHostPort(host, strconv.Itoa(r.Probe.Port))
				f.health[b] = startProber(target, *r.Probe, func() bool { return f.probeAdmitted(target) })
			}
		}
	}
	f.rule = r
}

// probeAdmitted asks the rule as it is now whether a probe of target gets
// through.
func (f *lbFrontend) probeAdmitted(target string) bool {
	f.mu.Lock()
	admit := f.rule.ProbeAdmit
	f.mu.Unlock()
	return admit == nil || admit(target)
}

func (f *lbFrontend) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for b, p := range f.health {
		p.stop()
		delete(f.health, b)
	}
}

func (f *lbFrontend) inRotation() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, b := range f.rule.Backends {
		if f.rule.Probe == nil {
			out = append(out, b)
		} else if p := f.health[b]; p != nil && p.isUp() {
			out = append(out, b)
		}
	}
	sort.Strings(out)
	return out
}

func (f *lbFrontend) serve() { acceptLoop(f.ln, f.forward) }

// forward sends a connection to the backend its hash picks among those in
// rotation. With none, or when the picked backend does not accept, the
// client's connection is reset: Azure drops the flow, and the client never
// reaches an application.
func (f *lbFrontend) forward(c net.Conn) {
	backends := f.inRotation()
	f.mu.Lock()
	dist, idle, admit := f.rule.Distribution, f.rule.IdleTimeout, f.rule.Admit
	f.mu.Unlock()
	if len(backends) == 0 {
		Reset(c)
		return
	}
	b := backends[pick(dist, c.RemoteAddr(), c.LocalAddr(), len(backends))]
	// The flow is hashed to its backend first; that backend's NSGs then
	// decide, as on Azure, where a flow an NSG drops is not sent elsewhere.
	if admit != nil {
		src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		if !admit(b, src.Addr().Unmap()) {
			Reset(c)
			return
		}
	}
	up, err := Dial(b)
	if err != nil {
		Reset(c)
		return
	}
	Splice(c, up, idle)
}

// pick hashes a connection's tuple as the distribution mode says.
func pick(d Distribution, src, dst net.Addr, n int) int {
	sh, sp, _ := net.SplitHostPort(src.String())
	dh, dp, _ := net.SplitHostPort(dst.String())
	h := fnv.New32a()
	parts := []string{sh, dh}
	switch d {
	case SourceIP:
	case SourceIPProtocol:
		parts = append(parts, "tcp")
	default:
		parts = append(parts, sp, dp, "tcp")
	}
	for _, p := range parts {
		_, _ = io.WriteString(h, p)
		_, _ = h.Write([]byte{0})
	}
	return int(h.Sum32() % uint32(n))
}

// Reset closes a connection with a TCP reset rather than an orderly close:
// how a flow that was refused or dropped ends for a client that already
// connected to a proxy.
func Reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Splice carries a connection both ways, as an address translation does
// (the load balancer's, a node's NodePort DNAT): until both sides have
// closed, a half-close passed on, or until neither side has sent anything
// for idle (when idle is set).
func Splice(a, b net.Conn, idle time.Duration) {
	defer a.Close()
	defer b.Close()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	// finSent marks the side this splice half-closed: a socket that sent
	// its FIN and then read the peer's is closed by the kernel as a reset
	// one is, so only a side still open for writing tells by its state.
	var finSent [2]atomic.Bool
	side := func(c net.Conn) *atomic.Bool {
		if c == a {
			return &finSent[0]
		}
		return &finSent[1]
	}
	pump := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			if idle > 0 {
				_ = src.SetReadDeadline(time.Now().Add(idle))
			}
			k, err := src.Read(buf)
			if k > 0 {
				last.Store(time.Now().UnixNano())
				if _, werr := dst.Write(buf[:k]); werr != nil {
					if errors.Is(werr, syscall.ECONNRESET) || errors.Is(werr, syscall.EPIPE) {
						Reset(src) // dst reset: its RST goes on to src
					}
					return
				}
			}
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < idle {
					continue // the other direction carried traffic
				}
				switch {
				case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF) && !side(src).Load() && wasReset(src):
					// A translation forwards packets: a RST from one
					// end reaches the other as a RST, not as the
					// orderly close this proxy's own Close would send.
					// (An end of file is a reset the other direction's
					// write was told of first.)
					Reset(dst)
				case errors.Is(err, io.EOF):
					if tc, ok := dst.(*net.TCPConn); ok {
						// The other direction may still carry the answer.
						side(dst).Store(true)
						_ = tc.CloseWrite()
					}
				}
				return
			}
		}
	}
	go pump(b, a)
	go pump(a, b)
	<-done
	<-done
}

// prober probes one backend, as Azure's health probes do, until stopped.
type prober struct {
	mu    sync.Mutex
	up    bool
	fails int
	quit  chan struct{}
}

// admitted, when set, is asked before each probe whether it gets through
// to the backend; a probe it refuses fails.
func startProber(target string, p Probe, admitted func() bool) *prober {
	pr := &prober{quit: make(chan struct{})}
	threshold := p.Threshold
	if threshold < 1 {
		threshold = 1
	}
	check := tcpCheck(target, p.Interval)
	if p.Protocol == "Http" || p.Protocol == "Https" {
		check = httpCheck(target, p)
	}
	go func() {
		t := time.NewTicker(p.Interval)
		defer t.Stop()
		for {
			ok := (admitted == nil || admitted()) && check()
			pr.mu.Lock()
			if ok {
				pr.up, pr.fails = true, 0
			} else if pr.fails++; pr.fails >= threshold {
				pr.up = false
			}
			pr.mu.Unlock()
			select {
			case <-pr.quit:
				return
			case <-t.C:
			}
		}
	}()
	return pr
}

func (p *prober) isUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up
}

func (p *prober) stop() { close(p.quit) }

// tcpCheck succeeds when the backend accepts a connection within the
// interval (Azure's TCP probe has no timeout of its own: it fails when the
// next probe is due).
func tcpCheck(target string, interval time.Duration) func() bool {
	return func() bool {
		for _, a := range localports.Candidates(target) {
			if c, err := net.DialTimeout("tcp", a, interval); err == nil {
				c.Close()
				return true
			}
		}
		return false
	}
}

// httpCheck succeeds when a GET of the probe's path answers 200 within the
// interval or 30 seconds, whichever is shorter. Redirects are answers
// other than 200: they fail.
func httpCheck(target string, p Probe) func() bool {
	timeout := p.Interval
	if timeout > 30*time.Second {
		timeout = 30 * time.Second
	}
	scheme := "http"
	if p.Protocol == "Https" {
		scheme = "https"
	}
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				var d net.Dialer
				var err error
				for _, a := range localports.Candidates(addr) {
					var c net.Conn
					if c, err = d.DialContext(ctx, "tcp", a); err == nil {
						return c, nil
					}
				}
				return nil, err
			},
			// Azure's HTTPS probe does not authenticate the backend.
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a health probe, as Azure's
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	path := p.Path
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	url := scheme + "://" + target + path
	return func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}
