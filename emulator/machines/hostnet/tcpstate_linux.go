package hostnet

import (
	"net"

	"golang.org/x/sys/unix"
)

// wasReset says whether a connection whose read just ended was ended by a
// reset rather than by the peer's FIN. Linux reports a reset once, to the
// first call on the socket (tcp_reset sets sk_err, and the socket moves to
// TCP_CLOSE); a later read sees an end of file. A FIN leaves the socket in
// TCP_CLOSE_WAIT instead, so the state tells the two apart after the error
// was taken by another call (the splice's write in the other direction),
// as long as this end has not sent its own FIN: a socket that has, and
// then reads the peer's, is closed by the kernel too (tcp_time_wait), so
// the caller asks only of a side it has not half-closed.
func wasReset(c net.Conn) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	var state uint8
	if err := raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			state = info.State
		}
	}); err != nil {
		return false
	}
	// x/sys names the kernel's TCP_CLOSE (include/net/tcp_states.h) only
	// among the BPF constants; the value is the same, 7.
	return state == unix.BPF_TCP_CLOSE
}
