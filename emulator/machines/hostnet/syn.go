package hostnet

import "time"

// SYNRetransmits is when a connect sends its SYN again while nothing
// answers, counted from the first, and when it gives up.
//   - Linux: an initial retransmission timeout of 1 s (RFC 6298 section
//     2.1), doubled at each of net.ipv4.tcp_syn_retries retransmissions,
//     6 by default, "which corresponds to retrying for up to approximately
//     127 seconds" (tcp(7) of the Linux man-pages).
//   - Windows: an initial timeout of 3 s and 2 retransmissions, so "the
//     TCP three-way handshake is limited to a 21-second timeframe"
//     (Microsoft KB 2786464 on MaxSynRetransmissions and InitialRto,
//     written for Windows Server 2008 R2; no later default was found
//     documented, so these stand for 2019 and 2022).
func SYNRetransmits(windows bool) (resend []time.Duration, giveUp time.Duration) {
	rto, retries := time.Second, 6
	if windows {
		rto, retries = 3*time.Second, 2
	}
	var at time.Duration
	for range retries {
		at += rto
		resend = append(resend, at)
		rto *= 2
	}
	return resend, at + rto
}
