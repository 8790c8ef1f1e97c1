// Package hostnet is the local world's network: every emulated machine's
// private address gets a loopback address of its own (Linux routes all of
// 127.0.0.0/8 to the loopback interface, so processes can listen on any of
// them without privileges), and a load balancer's frontend forwards TCP to
// the machines behind it.
package hostnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/winkube/winkube/localports"
)

// Network maps private addresses to loopback host addresses.
type Network struct {
	mu        sync.Mutex
	pool      netip.Prefix
	next      netip.Addr
	byPrivate map[string]netip.Addr
	private   map[netip.Addr]string
	frontends map[string]*frontend
	// rules are the load-balancing rules' frontends (lb.go).
	rules map[string]*lbFrontend
	// onChange is told when the address map gains an address.
	onChange func()
}

// New hands out host addresses from pool (a loopback prefix).
func New(pool netip.Prefix) (*Network, error) {
	if !pool.Addr().IsLoopback() {
		return nil, fmt.Errorf("host address pool %s is not a loopback prefix", pool)
	}
	pool = pool.Masked()
	return &Network{pool: pool, next: pool.Addr().Next(), byPrivate: map[string]netip.Addr{}, private: map[netip.Addr]string{}, frontends: map[string]*frontend{}}, nil
}

// HostAddress is the loopback address standing for a machine's private
// address; the same private address always gets the same one.
func (n *Network) HostAddress(private string) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.byPrivate[private]; ok {
		return a, nil
	}
	for n.pool.Contains(n.next) {
		a := n.next
		n.next = n.next.Next()
		if a.As4()[3] == 0 || a.As4()[3] == 255 {
			continue
		}
		n.byPrivate[private], n.private[a] = a, private
		if n.onChange != nil {
			n.onChange()
		}
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("host address pool %s is exhausted", n.pool)
}

// OnChange sets fn to be called whenever the address map gains an
// address, so that it can be saved as it changes. fn is called with the
// network's lock held: it must return at once and not call the network.
func (n *Network) OnChange(fn func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.onChange = fn
}

// Lookup is the host address of a private address the network has given
// one to; unlike HostAddress it hands out nothing.
func (n *Network) Lookup(private string) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.byPrivate[private]
	return a, ok
}

// Private is the private address a host address stands for.
func (n *Network) Private(host netip.Addr) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.private[host]
	return p, ok
}

// frontend is one inbound NAT rule's listener: it has no health probe.
type frontend struct {
	ln       net.Listener
	mu       sync.Mutex
	backends []string
	next     int
}

// AddBackend puts backend (host:port) behind frontend (host:port),
// listening on the frontend when it is the first backend.
func (n *Network) AddBackend(front, backend string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, ok := n.frontends[front]
	if !ok {
		ln, err := localports.Listen(front)
		if err != nil {
			return fmt.Errorf("load balancer frontend %s: %w", front, err)
		}
		f = &frontend{ln: ln}
		n.frontends[front] = f
		go f.serve()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.backends {
		if b == backend {
			return nil
		}
	}
	f.backends = append(f.backends, backend)
	return nil
}

// RemoveBackend takes backend out; the frontend stops listening when it
// has none left.
func (n *Network) RemoveBackend(front, backend string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, ok := n.frontends[front]
	if !ok {
		return
	}
	f.mu.Lock()
	for i, b := range f.backends {
		if b == backend {
			f.backends = append(f.backends[:i], f.backends[i+1:]...)
			break
		}
	}
	empty := len(f.backends) == 0
	f.mu.Unlock()
	if empty {
		_ = f.ln.Close()
		delete(n.frontends, front)
	}
}

// Close stops every frontend.
func (n *Network) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, f := range n.frontends {
		_ = f.ln.Close()
		delete(n.frontends, k)
	}
	n.closeRules()
}

func (f *frontend) serve() { acceptLoop(f.ln, f.forward) }

// acceptLoop hands each connection of ln to handle until ln is closed.
func acceptLoop(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go handle(c)
	}
}

// forward sends a connection to the backends in turn, skipping those that
// refuse it, as a load balancer's health probe would have taken them out.
func (f *frontend) forward(c net.Conn) {
	defer c.Close()
	f.mu.Lock()
	order := make([]string, 0, len(f.backends))
	for i := range f.backends {
		order = append(order, f.backends[(f.next+i)%len(f.backends)])
	}
	f.next++
	f.mu.Unlock()
	for _, b := range order {
		up, err := Dial(b)
		if err != nil {
			continue
		}
		defer up.Close()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
		go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
		<-done
		return
	}
}

// Dial connects to a machine's host address and port, where a privileged
// port may be served at its unprivileged alternate (see localports).
func Dial(addr string) (net.Conn, error) {
	var err error
	for _, a := range localports.Candidates(addr) {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", a, 5*time.Second); err == nil {
			return c, nil
		}
	}
	return nil, err
}

type saved struct {
	Next      string            `json:"next"`
	ByPrivate map[string]string `json:"byPrivate"`
}

// Save writes the address map, so that a restarted local world gives every
// machine the address its disk (etcd's peer URLs, certificates) expects.
func (n *Network) Save(path string) error {
	n.mu.Lock()
	s := saved{Next: n.next.String(), ByPrivate: map[string]string{}}
	for p, a := range n.byPrivate {
		s.ByPrivate[p] = a.String()
	}
	n.mu.Unlock()
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	// By rename: a process killed while saving leaves the last map whole.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Load reads a map Save wrote; a missing file is an empty map.
func (n *Network) Load(path string) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var s saved
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("host address map %s: %w", path, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for p, a := range s.ByPrivate {
		addr, err := netip.ParseAddr(a)
		if err != nil || !n.pool.Contains(addr) {
			return fmt.Errorf("host address map %s: %q is not in pool %s", path, a, n.pool)
		}
		n.byPrivate[p], n.private[addr] = addr, p
	}
	if next, err := netip.ParseAddr(s.Next); err == nil && n.pool.Contains(next) {
		n.next = next
	}
	return nil
}
