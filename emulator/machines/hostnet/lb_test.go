package hostnet

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/poll"
)

// backend is a machine's application (answering its name) and, on another
// port, its health endpoint, which a test switches off and on.
type backend struct {
	t      *testing.T
	name   string
	app    net.Listener
	mu     sync.Mutex
	health net.Listener
	addr   string // host of both
	hport  string
}

func newBackend(t *testing.T, host, name string) *backend {
	t.Helper()
	app, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	go func() {
		for {
			c, err := app.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, name)
			c.Close()
		}
	}()
	b := &backend{t: t, name: name, app: app, addr: host}
	b.healthOn("")
	t.Cleanup(b.healthOff)
	return b
}

func (b *backend) appAddr() string { return b.app.Addr().String() }

func (b *backend) healthOn(port string) {
	b.t.Helper()
	if port == "" {
		port = "0"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(b.addr, port))
	if err != nil {
		b.t.Fatal(err)
	}
	_, b.hport, _ = net.SplitHostPort(ln.Addr().String())
	b.mu.Lock()
	b.health = ln
	b.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

func (b *backend) healthOff() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.health != nil {
		b.health.Close()
		b.health = nil
	}
}

// ask connects to front, from the local address when given, and returns
// what it answers ("" when the connection is reset or closed unanswered).
func ask(t *testing.T, front, from string) string {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", front)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

func waitRotation(t *testing.T, n *Network, front string, want ...string) {
	t.Helper()
	poll.Until(t, 10*time.Second, func() string {
		if got := strings.Join(n.InRotation(front), ","); got != strings.Join(want, ",") {
			return "backends in rotation at " + front + ": [" + got + "], want " + strings.Join(want, ",")
		}
		return ""
	})
}

// TestProbesTakeBackendsOutAndBack: a backend whose probe port stops
// answering leaves the rotation after Threshold failures and gets no new
// connections; one success puts it back.
func TestProbesTakeBackendsOutAndBack(t *testing.T) {
	n, _ := New(netip.MustParsePrefix("127.3.4.0/24"))
	defer n.Close()
	a := newBackend(t, "127.3.4.10", "a")
	b := newBackend(t, "127.3.4.11", "b")
	b.healthOff()
	port := a.hport
	b.healthOn(port) // both backends' probe port is the same, as on Azure
	front := "127.3.4.1:18080"
	rule := Rule{Frontend: front, Backends: []string{a.appAddr(), b.appAddr()}, Distribution: Default,
		Probe: &Probe{Protocol: "Tcp", Port: mustAtoi(t, port), Interval: 20 * time.Millisecond, Threshold: 2}}
	if err := n.SetRules([]Rule{rule}); err != nil {
		t.Fatal(err)
	}
	waitRotation(t, n, front, a.appAddr(), b.appAddr())

	b.healthOff()
	waitRotation(t, n, front, a.appAddr())
	for i := 0; i < 20; i++ {
		if got := ask(t, front, ""); got != "a" {
			t.Fatalf("connection %d answered %q with b out of rotation, want a", i, got)
		}
	}
	b.healthOn(port)
	waitRotation(t, n, front, a.appAddr(), b.appAddr())

	// Neither answering its probe: the frontend still accepts (Azure's
	// frontend exists) but the flow goes nowhere.
	a.healthOff()
	b.healthOff()
	waitRotation(t, n, front)
	if got := ask(t, front, ""); got != "" {
		t.Fatalf("a frontend with no backend in rotation answered %q", got)
	}
}

// TestNewBackendStartsOutOfRotation: a backend joins the rotation once its
// first probe passes, not before.
func TestNewBackendStartsOutOfRotation(t *testing.T) {
	n, _ := New(netip.MustParsePrefix("127.3.5.0/24"))
	defer n.Close()
	a := newBackend(t, "127.3.5.10", "a")
	a.healthOff()
	front := "127.3.5.1:18080"
	// A long interval: the first probe (failing) is the only one the test
	// sees, so the backend must be out.
	probe := &Probe{Protocol: "Tcp", Port: 1, Interval: time.Hour, Threshold: 2}
	if err := n.SetRules([]Rule{{Frontend: front, Backends: []string{a.appAddr()}, Probe: probe}}); err != nil {
		t.Fatal(err)
	}
	if got := ask(t, front, ""); got != "" {
		t.Fatalf("a backend never probed up answered %q", got)
	}
	// The same rule without a probe: every backend takes connections.
	if err := n.SetRules([]Rule{{Frontend: front, Backends: []string{a.appAddr()}}}); err != nil {
		t.Fatal(err)
	}
	if got := ask(t, front, ""); got != "a" {
		t.Fatalf("a rule without a probe answered %q, want a", got)
	}
	// Rules that are gone stop listening.
	if err := n.SetRules(nil); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", front); err == nil {
		c.Close()
		t.Fatal("a removed rule's frontend still listens")
	}
}

func TestHTTPProbeNeeds200(t *testing.T) {
	n, _ := New(netip.MustParsePrefix("127.3.6.0/24"))
	defer n.Close()
	a := newBackend(t, "127.3.6.10", "a")
	var healthy sync.Mutex
	status, probes := http.StatusServiceUnavailable, 0
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		healthy.Lock()
		defer healthy.Unlock()
		probes++
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(status)
	})}
	ln, err := net.Listen("tcp", "127.3.6.10:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	front := "127.3.6.1:18080"
	probe := &Probe{Protocol: "Http", Port: ln.Addr().(*net.TCPAddr).Port, Path: "/healthz", Interval: 20 * time.Millisecond, Threshold: 1}
	if err := n.SetRules([]Rule{{Frontend: front, Backends: []string{a.appAddr()}, Probe: probe}}); err != nil {
		t.Fatal(err)
	}
	// 503 (kube-proxy's answer without a local endpoint) keeps it out,
	// probe after probe.
	poll.Until(t, 10*time.Second, func() string {
		healthy.Lock()
		defer healthy.Unlock()
		if probes < 3 {
			return "waiting for three probes"
		}
		return ""
	})
	if got := n.InRotation(front); len(got) != 0 {
		t.Fatalf("a backend answering 503 is in rotation: %v", got)
	}
	healthy.Lock()
	status = http.StatusOK
	healthy.Unlock()
	waitRotation(t, n, front, a.appAddr())
	if got := ask(t, front, ""); got != "a" {
		t.Fatalf("answered %q, want a", got)
	}
}

// TestDistributionModes: Default spreads one client's connections (they
// differ in source port); SourceIP keeps a client on one backend.
func TestDistributionModes(t *testing.T) {
	n, _ := New(netip.MustParsePrefix("127.3.7.0/24"))
	defer n.Close()
	var backends []string
	for i, name := range []string{"a", "b", "c"} {
		backends = append(backends, newBackend(t, "127.3.7."+strconv.Itoa(10*(i+1)), name).appAddr())
	}
	front := "127.3.7.1:18080"
	seen := func(from string, times int) map[string]int {
		out := map[string]int{}
		for i := 0; i < times; i++ {
			out[ask(t, front, from)]++
		}
		return out
	}
	if err := n.SetRules([]Rule{{Frontend: front, Backends: backends, Distribution: Default}}); err != nil {
		t.Fatal(err)
	}
	if got := seen("127.0.0.1", 30); len(got) < 2 || got[""] > 0 {
		t.Fatalf("Default distribution from one client: %v, want connections on several backends", got)
	}
	if err := n.SetRules([]Rule{{Frontend: front, Backends: backends, Distribution: SourceIP}}); err != nil {
		t.Fatal(err)
	}
	if got := seen("127.0.0.1", 30); len(got) != 1 || got[""] > 0 {
		t.Fatalf("SourceIP distribution from one client: %v, want one backend", got)
	}
	clients := map[string]bool{}
	for i := 2; i < 30; i++ {
		for b := range seen("127.0.0."+strconv.Itoa(i), 1) {
			clients[b] = true
		}
	}
	if len(clients) < 2 {
		t.Fatalf("SourceIP distribution of 28 clients: all on %v", clients)
	}
}

func TestIdleTimeoutClosesQuietConnections(t *testing.T) {
	n, _ := New(netip.MustParsePrefix("127.3.8.0/24"))
	defer n.Close()
	// An echo backend that never closes on its own.
	ln, err := net.Listen("tcp", "127.3.8.10:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	front := "127.3.8.1:18080"
	if err := n.SetRules([]Rule{{Frontend: front, Backends: []string{ln.Addr().String()}, IdleTimeout: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 2)
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("echo %q %v", buf, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("a quiet connection stayed open past its idle timeout")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a quiet connection was not closed by the load balancer")
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAdmitFiltersConnectionsAndProbes: a connection the rule's Admit
// refuses for its source never reaches the backend (reset), one it admits
// does, and the decision follows SetRules; a probe ProbeAdmit refuses
// fails, taking the backend out of rotation.
func TestAdmitFiltersConnectionsAndProbes(t *testing.T) {
	n, _ := New(netip.MustParsePrefix("127.3.7.0/24"))
	defer n.Close()
	a := newBackend(t, "127.3.7.10", "a")
	front := "127.3.7.1:18080"
	allowed := netip.MustParseAddr("127.3.7.20")
	var mu sync.Mutex
	var asked []string
	rule := Rule{Frontend: front, Backends: []string{a.appAddr()}, Admit: func(backend string, src netip.Addr) bool {
		mu.Lock()
		asked = append(asked, backend)
		mu.Unlock()
		return src == allowed
	}}
	if err := n.SetRules([]Rule{rule}); err != nil {
		t.Fatal(err)
	}
	if got := ask(t, front, "127.3.7.20"); got != "a" {
		t.Errorf("an admitted source got %q, want a", got)
	}
	if got := ask(t, front, "127.3.7.21"); got != "" {
		t.Errorf("a refused source got %q, want nothing", got)
	}
	mu.Lock()
	if len(asked) != 2 || asked[0] != a.appAddr() {
		t.Errorf("Admit was asked about %v, want the backend %s twice", asked, a.appAddr())
	}
	mu.Unlock()
	// The rule changes: the new decision applies to new connections.
	rule.Admit = func(string, netip.Addr) bool { return true }
	if err := n.SetRules([]Rule{rule}); err != nil {
		t.Fatal(err)
	}
	if got := ask(t, front, "127.3.7.21"); got != "a" {
		t.Errorf("after the rule changed, got %q, want a", got)
	}

	// Probes through ProbeAdmit.
	probe := &Probe{Protocol: "Tcp", Port: mustAtoi(t, a.hport), Interval: 20 * time.Millisecond, Threshold: 1}
	rule = Rule{Frontend: front, Backends: []string{a.appAddr()}, Probe: probe, ProbeAdmit: func(string) bool { return true }}
	if err := n.SetRules([]Rule{rule}); err != nil {
		t.Fatal(err)
	}
	waitRotation(t, n, front, a.appAddr())
	rule.ProbeAdmit = func(target string) bool { return target != net.JoinHostPort("127.3.7.10", a.hport) }
	if err := n.SetRules([]Rule{rule}); err != nil {
		t.Fatal(err)
	}
	waitRotation(t, n, front)
}

// TestFrontendOutlivesItsFirstBackend: the only backend is replaced, as a
// rollout replaces the only control-plane machine: b joins, a leaves the
// pool and its machine goes away; the frontend keeps listening and sends
// every connection to b. Azure's load balancer sends new flows to the
// healthy backends in the pool, whichever they are
// (learn.microsoft.com/azure/load-balancer/load-balancer-custom-probe-overview,
// "Probe down behavior").
func TestFrontendOutlivesItsFirstBackend(t *testing.T) {
	n, _ := New(netip.MustParsePrefix("127.3.6.0/24"))
	defer n.Close()
	a := newBackend(t, "127.3.6.10", "a")
	port := a.hport
	front := "127.3.6.1:16443"
	rule := func(backends ...*backend) []Rule {
		r := Rule{Frontend: front, Probe: &Probe{Protocol: "Tcp", Port: mustAtoi(t, port), Interval: 20 * time.Millisecond, Threshold: 2}}
		for _, b := range backends {
			r.Backends = append(r.Backends, b.appAddr())
		}
		return []Rule{r}
	}
	if err := n.SetRules(rule(a)); err != nil {
		t.Fatal(err)
	}
	waitRotation(t, n, front, a.appAddr())
	b := newBackend(t, "127.3.6.11", "b")
	b.healthOff()
	b.healthOn(port)
	if err := n.SetRules(rule(a, b)); err != nil {
		t.Fatal(err)
	}
	waitRotation(t, n, front, a.appAddr(), b.appAddr())
	if err := n.SetRules(rule(b)); err != nil {
		t.Fatal(err)
	}
	a.healthOff()
	a.app.Close()
	waitRotation(t, n, front, b.appAddr())
	for i := 0; i < 10; i++ {
		if got := ask(t, front, ""); got != "b" {
			t.Fatalf("connection %d to the frontend answered %q after a left, want b", i, got)
		}
	}
}
