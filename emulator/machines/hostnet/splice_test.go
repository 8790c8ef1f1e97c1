package hostnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSplice: what the load balancer's splice spends per message a
// backend streams to a client (a watch event through the API server's
// load balancer, about 4 KiB), with the idle timeout Azure's rules have
// by default (4 minutes). Measured on 2026-11-29 (2 cores, load 8): about
// 10 µs of CPU per 4 KiB message for sender, splice and reader together,
// no allocation; copying through the kernel's splice(2) (io.Copy between
// the TCP connections) instead of the 32 KiB buffer cost the same, so the
// copy stays as it is: the cost is the loopback sockets', per write.
func BenchmarkSplice(b *testing.B) {
	for _, size := range []int{512, 4 << 10, 64 << 10} {
		b.Run(byteSize(size), func(b *testing.B) {
			client, server := splicedPair(b, 4*time.Minute)
			msg := make([]byte, size)
			go func() {
				for range b.N {
					if _, err := server.Write(msg); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				if _, err := io.ReadFull(client, buf); err != nil {
					b.Fatal(err)
				}
			}
			// Wall time measures the machine's latency as much as the
			// work; the process's CPU time (sender, splice and reader
			// together) is the cost.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func byteSize(n int) string {
	if n%(1<<10) == 0 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// splicedPair is a client and a server connection joined by splice, as a
// load balancer's frontend joins a client to a backend.
func splicedPair(tb testing.TB, idle time.Duration) (client, server net.Conn) {
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	back, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { front.Close(); back.Close() })
	go func() {
		a, err := front.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", back.Addr().String())
		if err != nil {
			a.Close()
			return
		}
		Splice(a, up, idle)
	}()
	if client, err = net.Dial("tcp", front.Addr().String()); err != nil {
		tb.Fatal(err)
	}
	if server, err = back.Accept(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestSpliceCarriesResets: a connection one end resets reaches the other
// end reset, as through Azure's load balancer or a node's NodePort DNAT,
// which forward the RST; an orderly close stays an orderly close (a
// half-close, the answer still flowing back).
func TestSpliceCarriesResets(t *testing.T) {
	abort := func(c net.Conn) {
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	}
	// joined returns a client and a backend once the splice carries
	// bytes between them: a reset before that would meet the proxy's dial
	// of the backend, not the splice.
	joined := func(t *testing.T) (client, server net.Conn) {
		t.Helper()
		client, server = splicedPair(t, 0)
		if _, err := io.WriteString(client, "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(server, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		return client, server
	}
	readErr := func(c net.Conn) error {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(c)
		if err == nil {
			err = io.EOF // ReadAll reports an orderly end as no error
		}
		return err
	}
	t.Run("backend resets", func(t *testing.T) {
		client, server := joined(t)
		abort(server)
		if err := readErr(client); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("the client of a backend that reset reads %v, want connection reset", err)
		}
	})
	// The backend resets as the client's next bytes cross the splice: the
	// kernel reports a reset once, to the first call on the socket, which
	// may be the splice's write of those bytes; its read then sees an end
	// of file, which is still a reset and must reach the client as one.
	t.Run("backend resets under a write", func(t *testing.T) {
		for i := range 200 {
			client, server := joined(t)
			abort(server)
			_, werr := io.WriteString(client, "GET / HTTP/1.1\r\n\r\n")
			if err := readErr(client); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(werr, syscall.ECONNRESET) {
				t.Fatalf("try %d: the client writing to a backend that reset reads %v (write: %v), want connection reset", i, err, werr)
			}
		}
	})
	t.Run("backend answers and closes", func(t *testing.T) {
		client, server := splicedPair(t, 0)
		if _, err := io.WriteString(server, "page"); err != nil {
			t.Fatal(err)
		}
		server.Close()
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(client); err != nil || string(b) != "page" {
			t.Errorf("the client read %q, %v; want the page and an orderly end", b, err)
		}
	})
	t.Run("client resets", func(t *testing.T) {
		client, server := joined(t)
		abort(client)
		if err := readErr(server); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("the backend of a client that reset reads %v, want connection reset", err)
		}
	})
	t.Run("client closes its side", func(t *testing.T) {
		client, server := splicedPair(t, 0)
		if _, err := io.WriteString(client, "GET"); err != nil {
			t.Fatal(err)
		}
		_ = client.(*net.TCPConn).CloseWrite()
		got := make([]byte, 3)
		if _, err := io.ReadFull(server, got); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(server, "answer"); err != nil {
			t.Fatal(err)
		}
		server.Close()
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(client)
		if err != nil || string(b) != "answer" {
			t.Errorf("after its half-close the client read %q, %v; want the answer and an orderly end", b, err)
		}
	})
}
