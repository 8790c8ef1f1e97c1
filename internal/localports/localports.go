// Package localports is the local world's rule for privileged ports. Azure
// serves SSH on port 22 of a VM and of the API server's load balancer; on
// this machine every emulated address is a loopback address, and a process
// without the privilege to bind ports below 1024 serves such a port P at
// P+Offset of the same address instead. Clients of loopback addresses try
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
// process may not bind it, it listens on port+Offset of the same host.
func Listen(addr string) (net.Listener, error) {
	return listen(addr, func(a string) (net.Listener, error) { return net.Listen("tcp", a) })
}

func listen(addr string, bind func(string) (net.Listener, error)) (net.Listener, error) {
	ln, err := bind(addr)
	if err == nil || !errors.Is(err, syscall.EACCES) {
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

// Candidates are the addresses to dial for addr, in order.
func Candidates(addr string) []string {
	if alt, ok := Alternate(addr); ok {
		return []string{addr, alt}
	}
	return []string{addr}
}
