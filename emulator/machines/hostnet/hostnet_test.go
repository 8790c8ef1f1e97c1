package hostnet

import (
	"io"
	"net"
	"net/netip"
	"testing"
)

func TestHostAddressesAreStableAndDistinct(t *testing.T) {
	n, err := New(netip.MustParsePrefix("127.3.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := n.HostAddress("10.1.0.4")
	b, _ := n.HostAddress("10.1.0.5")
	again, _ := n.HostAddress("10.1.0.4")
	if a != again || a == b || !a.IsLoopback() {
		t.Errorf("addresses %s %s %s", a, b, again)
	}
	if p, ok := n.Private(b); !ok || p != "10.1.0.5" {
		t.Errorf("Private(%s) = %q", b, p)
	}
	if _, err := New(netip.MustParsePrefix("10.0.0.0/8")); err == nil {
		t.Error("a non-loopback pool was accepted")
	}
	small, _ := New(netip.MustParsePrefix("127.3.1.0/30"))
	var last error
	for i := 0; i < 5; i++ {
		_, last = small.HostAddress("10.0.0." + string(rune('1'+i)))
	}
	if last == nil {
		t.Error("an exhausted pool handed out an address")
	}
}

// TestLoadBalancerSkipsDeadBackends forwards to the backend that answers.
func TestLoadBalancerSkipsDeadBackends(t *testing.T) {
	n, _ := New(netip.MustParsePrefix("127.3.2.0/24"))
	defer n.Close()
	live, err := net.Listen("tcp", "127.3.2.10:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	go func() {
		for {
			c, err := live.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello")
			c.Close()
		}
	}()
	front := "127.3.2.1:16443"
	if err := n.AddBackend(front, "127.3.2.11:1"); err != nil { // nothing listens
		t.Fatal(err)
	}
	if err := n.AddBackend(front, live.Addr().String()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != "hello" {
			t.Errorf("connection %d read %q", i, b)
		}
	}
	n.RemoveBackend(front, live.Addr().String())
	n.RemoveBackend(front, "127.3.2.11:1")
	if c, err := net.Dial("tcp", front); err == nil {
		c.Close()
		t.Error("the frontend still listens with no backend")
	}
}
