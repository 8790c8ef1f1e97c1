package registry

import (
	"net"
	"sync/atomic"
)

// SetUnpackLimit sets what unpacking a gzipped archive may write, and
// returns a function that restores it.
func SetUnpackLimit(ratio, slack int64) (restore func()) {
	r, s := unpackRatio, unpackSlack
	unpackRatio, unpackSlack = ratio, slack
	return func() { unpackRatio, unpackSlack = r, s }
}

// OnListenUnix has fn see each Unix socket path ServePush binds, before
// the bind; it returns a function that restores the plain bind.
func OnListenUnix(fn func(path string)) (restore func()) {
	old := listenUnix
	listenUnix = func(p string) (net.Listener, error) {
		fn(p)
		return old(p)
	}
	return func() { listenUnix = old }
}

// CountConnections has the registries Started after it count the
// connections they accept, by whether the client opened with a TLS
// handshake; it returns the counts so far and a function that restores
// the plain listener.
func CountConnections() (counts func() (tls, plain int64), restore func()) {
	old := listenTCP
	var c connCounts
	listenTCP = func(addr string) (net.Listener, error) {
		ln, err := old(addr)
		if err != nil {
			return nil, err
		}
		return countingListener{Listener: ln, c: &c}, nil
	}
	return func() (int64, int64) { return c.tls.Load(), c.plain.Load() }, func() { listenTCP = old }
}

type connCounts struct{ tls, plain atomic.Int64 }

type countingListener struct {
	net.Listener
	c *connCounts
}

func (l countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &firstByteConn{Conn: conn, c: l.c}, nil
}

// firstByteConn counts its connection when the client's first byte
// arrives: 0x16 opens a TLS handshake record.
type firstByteConn struct {
	net.Conn
	c    *connCounts
	seen bool
}

func (f *firstByteConn) Read(b []byte) (int, error) {
	n, err := f.Conn.Read(b)
	if n > 0 && !f.seen {
		f.seen = true
		if b[0] == 0x16 {
			f.c.tls.Add(1)
		} else {
			f.c.plain.Add(1)
		}
	}
	return n, err
}
