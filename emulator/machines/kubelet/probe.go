package kubelet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/winkube/winkube/localports"
)

// probeRun is one probe of a container, counted as the kubelet's prober
// worker counts it: a result flips after successThreshold consecutive
// successes or failureThreshold consecutive failures.
type probeRun struct {
	kind string // Startup, Readiness, Liveness
	p    *corev1.Probe
	// ticks is when the kubelet's prober worker for this probe began: its
	// ticker fires every period from then, whenever the container started.
	ticks      time.Time
	due        time.Time
	ok         bool
	succ, fail int32
}

type probeSet struct{ startup, readiness, liveness *probeRun }

// The kubelet runs one prober worker per container and probe from the
// pod's sync that starts the containers (SyncPod's probeManager.AddPod,
// before the runtime pulls and starts them); the worker probes on a
// ticker of the probe's period counted from its own start, not from the
// container's start or from its last probe. A readiness probe is also run
// at once when the container's status first shows it running (the
// manager's UpdatePodStatus triggers the worker by hand); a liveness or
// startup probe waits for the ticker (kubernetes/kubernetes
// pkg/kubelet/prober/worker.go run and doProbe, prober_manager.go
// UpdatePodStatus, at 00421113e1c655426f1954d9865726f491265bcd). So a
// readiness probe that fails at the container's start is tried again at
// the worker's next tick, which comes less than a period later when the
// pod waited for its init containers. ticks is the worker's start. The
// kubelet delays a worker's ticker by a random part of the period when
// it started less than a period before; that phase is not simulated.
func newProbeSet(c *corev1.Container, start, ticks time.Time) probeSet {
	mk := func(kind string, p *corev1.Probe, initial bool) *probeRun {
		if p == nil {
			return nil
		}
		r := &probeRun{kind: kind, p: p, ok: initial, ticks: ticks}
		r.due = start.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
		if kind != "Readiness" {
			r.due = r.tickFrom(r.due)
		}
		return r
	}
	// Readiness starts as failed and liveness as passed, as in the kubelet.
	return probeSet{startup: mk("Startup", c.StartupProbe, false), readiness: mk("Readiness", c.ReadinessProbe, false), liveness: mk("Liveness", c.LivenessProbe, true)}
}

func (s probeSet) started() bool { return s.startup == nil || s.startup.ok }
func (s probeSet) ready() bool   { return s.readiness == nil || s.readiness.ok }

// next is when a probe is next due.
func (s probeSet) next() time.Time {
	var t time.Time
	for _, p := range []*probeRun{s.startup, s.readiness, s.liveness} {
		if p == nil || (p == s.startup && p.ok) || (p != s.startup && !s.started()) {
			continue
		}
		if t.IsZero() || p.due.Before(t) {
			t = p.due
		}
	}
	return t
}

// tickFrom is the worker's first tick at or after t.
func (p *probeRun) tickFrom(t time.Time) time.Time {
	if !t.After(p.ticks) {
		return p.ticks
	}
	period := time.Duration(defaulted(p.p.PeriodSeconds, 10)) * time.Second
	n := (t.Sub(p.ticks) + period - 1) / period
	return p.ticks.Add(n * period)
}

func defaulted(v, d int32) int32 {
	if v <= 0 {
		return d
	}
	return v
}

// record counts one result; true when the probe's result changed.
func (p *probeRun) record(now time.Time, ok bool) bool {
	p.due = p.tickFrom(now.Add(time.Nanosecond))
	was := p.ok
	if ok {
		p.succ, p.fail = p.succ+1, 0
		// Liveness and startup probes must have successThreshold 1.
		if p.succ >= defaulted(p.p.SuccessThreshold, 1) || p.kind != "Readiness" {
			p.ok = true
		}
	} else {
		p.fail, p.succ = p.fail+1, 0
		if p.fail >= defaulted(p.p.FailureThreshold, 3) {
			p.ok = false
		}
	}
	return was != p.ok
}

// runProbes runs the container's due probes; it returns why the kubelet
// kills the container ("failed liveness probe"), or "".
func (r *podRun) runProbes(now time.Time, c *ctrRun, exec ExecProbe) string {
	s := &c.probes
	do := func(p *probeRun) (bool, bool) {
		if p == nil || now.Before(p.due) {
			return false, false
		}
		ok, msg := r.probe(c, p.p, exec)
		if !ok {
			r.event(corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", p.kind, msg)
		}
		return true, p.record(now, ok)
	}
	if s.startup != nil && !s.startup.ok {
		do(s.startup)
		if !s.startup.ok {
			if s.startup.fail >= defaulted(s.startup.p.FailureThreshold, 3) {
				return "failed startup probe"
			}
			return ""
		}
		// Started: the other probes begin, their initial delay counted from
		// the container's start.
		for _, p := range []*probeRun{s.readiness, s.liveness} {
			if p != nil && p.due.Before(now) {
				p.due = now
			}
		}
	}
	if ran, _ := do(s.liveness); ran && !s.liveness.ok {
		return "failed liveness probe"
	}
	do(s.readiness)
	return ""
}

// probe runs a probe as the kubelet's prober does, against the pod's
// simulated servers (serve.go): a TCP probe connects, an HTTP probe GETs
// its path and passes on a 2xx or 3xx answer, so a probe and curl see the
// same thing; a port no container serves refuses the connection, as an
// unserved port of a real pod does. A gRPC probe passes when the port
// accepts a connection: the simulated server speaks HTTP, not gRPC's
// health protocol, and is counted as SERVING. An exec probe runs when the
// runtime models its command (exec); otherwise it cannot run: it is
// counted as succeeding, and the kubelet says so in an event.
func (r *podRun) probe(c *ctrRun, p *corev1.Probe, exec ExecProbe) (bool, string) {
	ip := "0.0.0.0"
	if r.podIP != "" {
		ip = r.podIP
	}
	host, port, scheme, path := ip, int32(0), "", ""
	switch {
	case p.Exec != nil:
		if exec != nil {
			if handled, ok, msg := exec(r.pod, c.spec.Name, p.Exec.Command); handled {
				return ok, msg
			}
		}
		r.event(corev1.EventTypeNormal, "ProbeNotRun", "exec probe %q of container %s not run: the emulated container runs no process, so the kubelet counts it as succeeding", strings.Join(p.Exec.Command, " "), c.spec.Name)
		return true, ""
	case p.TCPSocket != nil:
		port = namedPort(c, p.TCPSocket.Port)
		if p.TCPSocket.Host != "" {
			host = p.TCPSocket.Host
		}
	case p.HTTPGet != nil:
		port = namedPort(c, p.HTTPGet.Port)
		if p.HTTPGet.Host != "" {
			host = p.HTTPGet.Host
		}
		scheme, path = strings.ToLower(string(p.HTTPGet.Scheme)), p.HTTPGet.Path
		if scheme == "" {
			scheme = "http"
		}
		if path == "" || path[0] != '/' {
			path = "/" + path
		}
	case p.GRPC != nil:
		port = p.GRPC.Port
	default:
		return false, "probe has no handler"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	timeout := time.Duration(defaulted(p.TimeoutSeconds, 1)) * time.Second
	// The prober runs in the node's network namespace and reaches the pod
	// at its IP, which in the local world is served at the pod's host
	// address; a hostNetwork pod's localhost is the node's.
	target := addr
	local := host == ip || (r.pod.Spec.HostNetwork && (host == "localhost" || host == "127.0.0.1" || host == r.hostIP))
	if local && r.net != nil && r.net.addr.IsValid() {
		target = net.JoinHostPort(r.net.addr.String(), strconv.Itoa(int(port)))
	}
	conn, err := dialProbe(target, timeout)
	if err != nil {
		if p.GRPC != nil {
			return false, fmt.Sprintf("timeout: failed to connect service %q within %ds: context deadline exceeded", addr, defaulted(p.TimeoutSeconds, 1))
		}
		msg := "dial tcp " + addr + ": connect: connection refused"
		if !errors.Is(err, syscall.ECONNREFUSED) {
			msg = "dial tcp " + addr + ": " + errText(err)
		}
		if p.HTTPGet != nil {
			msg = fmt.Sprintf("Get %q: ", scheme+"://"+addr+path) + msg
		}
		return false, msg
	}
	if p.HTTPGet == nil {
		conn.Close()
		return true, ""
	}
	return httpGetOver(conn, scheme+"://"+addr+path, p.HTTPGet.HTTPHeaders, timeout)
}

// dialProbe connects to a pod's port, where a privileged port may be
// served at its unprivileged alternate (see localports).
func dialProbe(addr string, timeout time.Duration) (net.Conn, error) {
	var err error
	for _, a := range localports.Candidates(addr) {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", a, timeout); err == nil {
			return c, nil
		}
	}
	return nil, err
}

// errText is a dial error without the address it was dialed at, which is
// the pod's host address rather than the pod IP the prober names.
func errText(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// httpGetOver makes an HTTP probe's request on conn, as the kubelet's
// prober does (no certificate checks, no redirects followed off the pod).
func httpGetOver(conn net.Conn, url string, headers []corev1.HTTPHeader, timeout time.Duration) (bool, string) {
	used := false
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used {
				return nil, errors.New("the probe's one connection is used")
			}
			used = true
			return conn, nil
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet's prober does not verify either
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Timeout: timeout, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		conn.Close()
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "kube-probe")
	for _, h := range headers {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := cl.Do(req)
	if !used {
		conn.Close()
	}
	if err != nil {
		return false, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return true, ""
}

// namedPort resolves a probe's port, by number or by a containerPort name.
func namedPort(c *ctrRun, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return int32(n)
	}
	return 0
}
