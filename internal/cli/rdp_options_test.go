package cli

import (
	"errors"
	"strings"
	"testing"
)

// TestRDPOptionsValidate: a local end no tunnel could listen on is refused
// before the management cluster is asked, as bad input naming the flag.
func TestRDPOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		port int
		bind string
		want string // "" for valid
	}{
		{"defaults", 5555, "127.0.0.1", ""},
		{"a free port", 0, "127.0.0.1", ""},
		{"every interface", 3390, "0.0.0.0", ""},
		{"IPv6 loopback", 5555, "::1", ""},
		{"a name", 5555, "localhost", ""},
		{"a negative port", -1, "127.0.0.1", "--local-port -1: want a TCP port from 1 to 65535 (0 picks a free one)"},
		{"a port past 65535", 70000, "127.0.0.1", "--local-port 70000"},
		{"a port in the address", 5555, "127.0.0.1:5556", "--bind-address 127.0.0.1:5556: give the address alone, such as 127.0.0.1; the port is --local-port 5556"},
		{"no address", 5555, "", `--bind-address "": give the local address to listen on`},
	} {
		o := rdpOptions{Node: "win-abcde", LocalPort: c.port, BindAddress: c.bind}
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}

// TestRDPRefusesABindAddressWithAPort: before, the port in --bind-address
// reached net.Listen after the cluster was asked, as "too many colons".
func TestRDPRefusesABindAddressWithAPort(t *testing.T) {
	_, err := run(t, "rdp", "win-abcde", "--kubeconfig", "/nonexistent", "--bind-address", "127.0.0.1:5556")
	var u *UsageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "--bind-address 127.0.0.1:5556") || !strings.Contains(err.Error(), "winkube rdp --help") {
		t.Fatalf("%v, want bad input naming --bind-address and rdp's --help", err)
	}
}
