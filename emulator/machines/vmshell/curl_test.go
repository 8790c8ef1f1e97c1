package vmshell

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// webMachine is a machine whose network has one web server at
// 10.96.0.10:80 (a Service, as the node's kube-proxy would reach it), a
// closed port at 10.96.0.11:80 and nothing else.
func webMachine(t *testing.T, m *Machine) *Machine {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Winkube-Simulated", "true")
		if r.URL.Path == "/missing" {
			w.WriteHeader(http.StatusNotFound)
		}
		_, _ = w.Write([]byte("winkube simulated container\npod: default/iis-1\n"))
	}))
	t.Cleanup(srv.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAt := closed.Addr().String()
	closed.Close()
	m.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		switch addr {
		case "10.96.0.10:80":
			return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
		case "10.96.0.11:80":
			return d.DialContext(ctx, "tcp", refusedAt)
		}
		return nil, errors.New("dial tcp " + addr + ": connect: connection timed out")
	}
	return m
}

func TestCurlOnLinux(t *testing.T) {
	m := webMachine(t, &Machine{Hostname: "node-1", Disk: vmdisk.Disk{Root: t.TempDir(), User: "capi"}})
	out, _, s := run(m, "curl http://10.96.0.10/")
	if s != 0 || !strings.Contains(out, "pod: default/iis-1") {
		t.Errorf("curl: %q %d", out, s)
	}
	out, _, s = run(m, "sudo curl -si 10.96.0.10")
	if s != 0 || !strings.HasPrefix(out, "HTTP/1.1 200 OK\r\n") || !strings.Contains(out, "X-Winkube-Simulated: true") {
		t.Errorf("curl -i: %q %d", out, s)
	}
	if _, errOut, s := run(m, "curl http://10.96.0.11/"); s != 7 || !strings.Contains(errOut, "curl: (7) Failed to connect to 10.96.0.11 port 80") {
		t.Errorf("refused: %q %d", errOut, s)
	}
	if _, errOut, s := run(m, "curl -sf http://10.96.0.10/missing"); s != 22 || errOut != "" {
		t.Errorf("-sf on 404: %q %d", errOut, s)
	}
	if _, errOut, s := run(m, "curl http://web.default.svc.cluster.local/"); s != 6 || !strings.Contains(errOut, "Could not resolve host") {
		t.Errorf("a name: %q %d", errOut, s)
	}
	if _, errOut, s := run(m, "curl --data x http://10.96.0.10/"); s != exitNotFound || !strings.Contains(errOut, "cannot run") {
		t.Errorf("an option it does not know: %q %d", errOut, s)
	}
}

func TestInvokeWebRequestOnWindows(t *testing.T) {
	m := webMachine(t, windowsMachine(t))
	// Windows PowerShell's curl is Invoke-WebRequest.
	for _, line := range []string{"curl http://10.96.0.10/", "Invoke-WebRequest -Uri http://10.96.0.10/ -UseBasicParsing", "iwr 10.96.0.10"} {
		out, errOut, s := run(m, line)
		if s != 0 || !strings.Contains(out, "StatusCode        : 200") || !strings.Contains(out, "Content           : winkube simulated container") ||
			!strings.Contains(out, "[X-Winkube-Simulated, true]") {
			t.Errorf("%s: %q %q %d", line, out, errOut, s)
		}
	}
	if _, errOut, s := run(m, "Invoke-WebRequest http://10.96.0.11/"); s != exitFailed || !strings.Contains(errOut, "Unable to connect to the remote server") {
		t.Errorf("refused: %q %d", errOut, s)
	}
	if _, errOut, s := run(m, "curl http://10.96.0.10/missing"); s != exitFailed || !strings.Contains(errOut, "(404) Not Found") {
		t.Errorf("404: %q %d", errOut, s)
	}
	// curl.exe is the real curl, which Windows ships.
	if out, _, s := run(m, "curl.exe -s http://10.96.0.10/"); s != 0 || !strings.HasPrefix(out, "winkube simulated container") {
		t.Errorf("curl.exe: %q %d", out, s)
	}
	if out, _, s := run(&Machine{Hostname: "win", Disk: m.Disk, cmd: true, Dial: m.Dial}, "curl http://10.96.0.10/"); s != 0 || !strings.HasPrefix(out, "winkube simulated container") {
		t.Errorf("cmd.exe's curl: %q %d", out, s)
	}
}
