package kubeproxy

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestPipeCarriesResets: an endpoint that resets a NodePort connection
// resets the client's too, as the node's DNAT forwards the RST; an
// endpoint's orderly close reaches the client as an orderly end after
// the answer.
func TestPipeCarriesResets(t *testing.T) {
	// tcpPair is both ends of one loopback TCP connection.
	tcpPair := func(t *testing.T) (dialled, accepted net.Conn) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if dialled, err = net.Dial("tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
		if accepted, err = ln.Accept(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dialled.Close(); accepted.Close() })
		return dialled, accepted
	}
	// piped is a client's connection to a NodePort, piped to an
	// endpoint's.
	piped := func(t *testing.T) (client, endpoint net.Conn) {
		client, nodePort := tcpPair(t)
		up, endpoint := tcpPair(t)
		go pipe(nodePort, up)
		return client, endpoint
	}
	read := func(c net.Conn) (string, error) {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		return string(b), err
	}
	t.Run("endpoint resets", func(t *testing.T) {
		client, endpoint := piped(t)
		reset(endpoint)
		if _, err := read(client); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("the client of an endpoint that reset reads %v, want connection reset", err)
		}
	})
	t.Run("endpoint answers and closes", func(t *testing.T) {
		client, endpoint := piped(t)
		if _, err := io.WriteString(endpoint, "page"); err != nil {
			t.Fatal(err)
		}
		endpoint.Close()
		if got, err := read(client); err != nil || got != "page" {
			t.Errorf("the client read %q, %v; want the page and an orderly end", got, err)
		}
	})
}
