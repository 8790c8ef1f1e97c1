// Package localports is the local world's rule for privileged ports. Azure
// serves SSH on port 22 of a VM and of the API server's load balancer; on
// this machine every emulated address is a loopback address, and a process
// that cannot bind a port P below 1024 (no privilege, or the host's own
// sshd on *:22) serves it at P+Offset of the same address instead. Clients of loopback addresses try
// both, so the same commands work for root and for everybody else.
package localports

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
)

// Offset moves a privileged port into the unprivileged range.
const Offset = 10000

// Listen listens on addr (host:port); when the port is privileged and this
// process may not bind it (no privilege, or a host service holds the port
// on every address), it listens on port+Offset of the same host.
func Listen(addr string) (net.Listener, error) {
	return listen(addr, func(a string) (net.Listener, error) { return net.Listen("tcp", a) })
}

func listen(addr string, bind func(string) (net.Listener, error)) (net.Listener, error) {
	ln, err := bind(addr)
	// EADDRINUSE too: the host's own sshd listening on *:22 takes port 22
	// of every loopback address.
	if err == nil || !(errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EADDRINUSE)) {
		return ln, err
	}
	if alt, ok := Alternate(addr); ok {
		return bind(alt)
	}
	return nil, err
}

// Alternate is where a privileged port of a loopback address is served when
// it cannot be bound; ok is false for any other address.
func Alternate(addr string) (string, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return "", false
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p >= 1024 {
		return "", false
	}
	return net.JoinHostPort(host, strconv.Itoa(p+Offset)), true
}

// Candidates are the addresses to dial for addr, in order. The alternate
// comes first: where it is served, port P of the address may well be the
// host's own service answering on every address.
func Candidates(addr string) []string {
	if alt, ok := Alternate(addr); ok {
		return []string{alt, addr}
	}
	return []string{addr}
}
