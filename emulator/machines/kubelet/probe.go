package kubelet

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeRun is one probe of a container, counted as the kubelet's prober
// worker counts it: a result flips after successThreshold consecutive
// successes or failureThreshold consecutive failures.
type probeRun struct {
	kind       string // Startup, Readiness, Liveness
	p          *corev1.Probe
	due        time.Time
	ok         bool
	succ, fail int32
}

type probeSet struct{ startup, readiness, liveness *probeRun }

func newProbeSet(c *corev1.Container, start time.Time) probeSet {
	mk := func(kind string, p *corev1.Probe, initial bool) *probeRun {
		if p == nil {
			return nil
		}
		return &probeRun{kind: kind, p: p, ok: initial, due: start.Add(time.Duration(p.InitialDelaySeconds) * time.Second)}
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

func defaulted(v, d int32) int32 {
	if v <= 0 {
		return d
	}
	return v
}

// record counts one result; true when the probe's result changed.
func (p *probeRun) record(now time.Time, ok bool) bool {
	p.due = now.Add(time.Duration(defaulted(p.p.PeriodSeconds, 10)) * time.Second)
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
func (r *podRun) runProbes(now time.Time, c *ctrRun) string {
	s := &c.probes
	do := func(p *probeRun) (bool, bool) {
		if p == nil || now.Before(p.due) {
			return false, false
		}
		ok, msg := r.probe(c, p.p)
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

// probe answers a probe as the simulated pod can: no process runs, so
// a TCP, HTTP or gRPC probe connects only to a port a running container's
// image serves (Listens), and then succeeds (any HTTP path answers 200);
// any other port refuses the connection, as an unserved port of a real
// pod does. An exec probe cannot run: it is counted as succeeding, and the
// kubelet says so in an event.
func (r *podRun) probe(c *ctrRun, p *corev1.Probe) (bool, string) {
	ip := "0.0.0.0"
	if r.podIP != "" {
		ip = r.podIP
	}
	host, port, what := ip, int32(0), ""
	switch {
	case p.Exec != nil:
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
		scheme := strings.ToLower(string(p.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		what = fmt.Sprintf("Get %q: ", scheme+"://"+net.JoinHostPort(host, strconv.Itoa(int(port)))+p.HTTPGet.Path)
	case p.GRPC != nil:
		port = p.GRPC.Port
	default:
		return false, "probe has no handler"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	local := host == ip || (r.pod.Spec.HostNetwork && (host == "localhost" || host == "127.0.0.1" || host == r.hostIP))
	if local {
		// Containers of a pod share its network: any of them may serve.
		for _, o := range r.mains {
			if o.running && listensOn(r.images[o.spec.Name], port) {
				return true, ""
			}
		}
	}
	if p.GRPC != nil {
		return false, fmt.Sprintf("timeout: failed to connect service %q within %ds: context deadline exceeded", addr, defaulted(p.TimeoutSeconds, 1))
	}
	return false, what + "dial tcp " + addr + ": connect: connection refused"
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

// listensOn says whether an image's process serves a TCP port.
func listensOn(img *Pulled, port int32) bool {
	if img == nil {
		return false
	}
	for _, l := range img.Listens {
		n, proto, _ := strings.Cut(l, "/")
		if n == strconv.Itoa(int(port)) && (proto == "" || strings.EqualFold(proto, "tcp")) {
			return true
		}
	}
	return false
}
