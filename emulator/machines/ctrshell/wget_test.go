package ctrshell

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A busybox container fetches a Service's ClusterIP through its pod's
// network; a port where nothing listens is busybox's "can't connect to
// remote host" (libbb/xconnect.c) with exit 1, and a status 404 its
// "server returned error". The pod's network here routes the VIP to a
// real server and every other address to a real closed port, so the
// refusal is the kernel's.
func TestBusyboxWgetReachesTheService(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "hello from the service\n")
	}))
	defer srv.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	c := linuxContainer(t, "docker.io/library/busybox:1.36")
	var dialed []string
	c.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		dialed = append(dialed, addr)
		var d net.Dialer
		if addr == "10.96.0.20:80" {
			return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
		}
		return d.DialContext(ctx, "tcp", closedAddr)
	}

	code, out, errs, err := run(t, c, []string{"wget", "-qO-", "http://10.96.0.20:80/"}, "")
	if err != nil || code != 0 || out != "hello from the service\n" || errs != "" && !strings.HasPrefix(errs, "winkube: ") {
		t.Errorf("wget -qO- the VIP: code %d err %v out %q errs %q", code, err, out, errs)
	}
	if len(dialed) != 1 || dialed[0] != "10.96.0.20:80" {
		t.Errorf("dialed %q, want the VIP through the pod's network", dialed)
	}

	code, _, errs, _ = run(t, c, []string{"sh", "-c", "wget -q -T 5 -O - http://10.96.0.20:81/"}, "")
	if code != 1 || !strings.Contains(errs, "wget: can't connect to remote host (10.96.0.20): Connection refused\n") {
		t.Errorf("closed port: code %d errs %q", code, errs)
	}

	code, _, errs, _ = run(t, c, []string{"wget", "-O", "-", "http://10.96.0.20/missing"}, "")
	if code != 1 || !strings.Contains(errs, "Connecting to 10.96.0.20 (10.96.0.20:80)\n") || !strings.Contains(errs, "wget: server returned error: HTTP/1.1 404 Not Found\n") {
		t.Errorf("404: code %d errs %q", code, errs)
	}

	// Without -O the file is named from the URL, and not overwritten.
	if code, _, errs, _ := run(t, c, []string{"sh", "-c", "wget http://10.96.0.20/"}, ""); code != 0 || !strings.Contains(errs, "'index.html' saved") {
		t.Errorf("save: code %d errs %q", code, errs)
	}
	if code, out, _, _ := run(t, c, []string{"cat", "/index.html"}, ""); code != 0 || out != "hello from the service\n" {
		t.Errorf("index.html: %d %q", code, out)
	}
	if code, _, errs, _ := run(t, c, []string{"sh", "-c", "wget -q http://10.96.0.20/"}, ""); code != 1 || !strings.Contains(errs, "wget: can't open 'index.html': File exists") {
		t.Errorf("existing file: code %d errs %q", code, errs)
	}
	// A name: the simulated pod resolves none.
	if code, _, errs, _ := run(t, c, []string{"wget", "-qO-", "http://web.default.svc/"}, ""); code != 1 || !strings.Contains(errs, "wget: bad address 'web.default.svc'") {
		t.Errorf("name: code %d errs %q", code, errs)
	}
}

// An image without busybox has no wget: Debian's nginx image.
func TestWgetOnlyWhereTheImageHasIt(t *testing.T) {
	c := linuxContainer(t, "docker.io/library/nginx:1.27")
	code, _, errs, _ := run(t, c, []string{"sh", "-c", "wget -qO- http://10.96.0.20/"}, "")
	if code != 127 || !strings.Contains(errs, "wget: not found") {
		t.Errorf("nginx: code %d errs %q", code, errs)
	}
}
