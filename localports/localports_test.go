package localports

import (
	"fmt"
	"net"
	"reflect"
	"syscall"
	"testing"
)

func TestAlternateOnlyForPrivilegedLoopbackPorts(t *testing.T) {
	cases := map[string]string{
		"127.1.0.4:22":   "127.1.0.4:10022",
		"127.0.0.1:443":  "127.0.0.1:10443",
		"127.1.0.4:2201": "",
		"10.1.0.4:22":    "",
		"20.30.40.50:22": "",
		"localhost:22":   "",
		"garbage":        "",
	}
	for in, want := range cases {
		got, ok := Alternate(in)
		if ok != (want != "") || got != want {
			t.Errorf("Alternate(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if got := Candidates("127.1.0.4:22"); !reflect.DeepEqual(got, []string{"127.1.0.4:10022", "127.1.0.4:22"}) {
		t.Errorf("Candidates = %v", got)
	}
	if got := Candidates("10.0.0.1:22"); !reflect.DeepEqual(got, []string{"10.0.0.1:22"}) {
		t.Errorf("Candidates = %v", got)
	}
}

// A bind the kernel refuses for lack of privilege moves to the alternate
// port; any other failure is returned as it is.
func TestListenFallsBackOnlyWhenRefusedPrivilege(t *testing.T) {
	var tried []string
	denied := func(a string) (net.Listener, error) {
		tried = append(tried, a)
		if a == "127.3.0.9:22" {
			return nil, &net.OpError{Op: "listen", Err: fmt.Errorf("bind: %w", syscall.EACCES)}
		}
		return net.Listen("tcp", "127.0.0.1:0")
	}
	ln, err := listen("127.3.0.9:22", denied)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if !reflect.DeepEqual(tried, []string{"127.3.0.9:22", "127.3.0.9:10022"}) {
		t.Errorf("tried %v", tried)
	}
	tried = nil
	hostSSHD := func(a string) (net.Listener, error) {
		tried = append(tried, a)
		if a == "127.3.0.9:22" {
			return nil, &net.OpError{Op: "listen", Err: fmt.Errorf("bind: %w", syscall.EADDRINUSE)}
		}
		return net.Listen("tcp", "127.0.0.1:0")
	}
	if ln, err := listen("127.3.0.9:22", hostSSHD); err != nil || len(tried) != 2 {
		t.Errorf("port 22 held by the host's sshd: %v, tried %v", err, tried)
	} else {
		ln.Close()
	}
	other := func(a string) (net.Listener, error) { return nil, syscall.EADDRNOTAVAIL }
	if _, err := listen("127.3.0.9:22", other); err == nil {
		t.Error("another failure must be an error, not a move to another port")
	}
	if _, err := listen("127.3.0.9:6443", func(string) (net.Listener, error) { return nil, syscall.EADDRINUSE }); err == nil {
		t.Error("an unprivileged port in use must be an error")
	}
}
