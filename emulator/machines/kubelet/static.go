package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// Process is the real process behind a static pod's container (a control
// plane's etcd, kube-apiserver, ...).
type Process interface {
	// Wait blocks until the process exits (ok) or ctx ends, and returns
	// its exit code and its last log lines.
	Wait(ctx context.Context) (code int, tail string, ok bool)
	// Restart starts it again after it exited.
	Restart() error
	// Kill stops the running process as the kubelet stops a container
	// (SIGTERM); Wait then reports its exit.
	Kill()
}

// staticRun is a static pod's container as the kubelet sees its process.
func (k *Kubelet) staticRun(sp *corev1.Pod) *podRun {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.static[sp.Name]
	if !ok {
		r = newPodRun(sp)
		r.probing = now()
		for _, c := range r.mains {
			// Started by the machine before the kubelet ran.
			c.running, c.started = true, r.probing
			c.probes = newProbeSet(&c.spec, c.started, r.probing)
		}
		k.static[sp.Name] = r
	}
	return r
}

// supervise restarts a static pod's process whenever it exits, as the
// kubelet restarts a static pod's container (restartPolicy Always), with
// the crash-loop back-off, and has the mirror pod show it.
func (k *Kubelet) supervise(ctx context.Context, sp *corev1.Pod, p Process) {
	r := k.staticRun(sp)
	if len(r.mains) == 0 {
		return
	}
	c := r.mains[0]
	code, tail, ok := p.Wait(ctx)
	for ok {
		at := now()
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		k.mu.Lock()
		r.exit(at, c, int32(code), reason, tail)
		wait := c.waitUntil.Sub(at)
		k.mu.Unlock()
		k.cfg.Logs.Write(vmdisk.Kubelet, "static pod %s: container %s exited with code %d; restarting in %s (restart %d)", sp.Name, c.spec.Name, code, wait, c.restarts)
		k.kickMirror()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := p.Restart(); err != nil {
			code, tail = 128, err.Error()
			continue
		}
		k.mu.Lock()
		c.running, c.started, c.waitUntil, c.waitMsg = true, now(), time.Time{}, ""
		c.probes = newProbeSet(&c.spec, c.started, r.probing)
		k.mu.Unlock()
		k.cfg.Logs.Write(vmdisk.Kubelet, "static pod %s: container %s started again", sp.Name, c.spec.Name)
		k.kickMirror()
		code, tail, ok = p.Wait(ctx)
	}
}

// now is the time to the second, as the API keeps a status's times, so
// that an unchanged status compares equal to the one read back.
func now() time.Time { return time.Now().Truncate(time.Second) }

func (k *Kubelet) kickMirror() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// staticStatus is a mirror pod's status from its static pod's process.
func (k *Kubelet) staticStatus(cur *corev1.Pod) *corev1.PodStatus {
	s := cur.Status.DeepCopy()
	setIPs(s, k.cfg.Address, k.cfg.Address)
	images := map[string]*Pulled{}
	for _, c := range cur.Spec.Containers {
		images[c.Name] = &Pulled{ImageID: c.Image}
	}
	var r *podRun
	for _, sp := range k.cfg.StaticPods {
		if cur.Name == sp.Name+"-"+k.cfg.NodeName {
			r = k.staticRun(sp)
		}
	}
	if r == nil {
		return s
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r.pod, r.images = cur, images
	if s.StartTime == nil && len(r.mains) > 0 {
		s.StartTime = ptr.To(metav1.NewTime(r.mains[0].started))
	}
	r.fill(s)
	return s
}

// probeStatic runs a static pod's probes against its real process, as the
// kubelet's prober does (kubeadm gives the control-plane pods liveness,
// readiness and startup probes): readiness makes the mirror pod Ready, a
// failed liveness or startup probe has the process killed and restarted.
func (k *Kubelet) probeStatic(ctx context.Context, sp *corev1.Pod, p Process) {
	r := k.staticRun(sp)
	if len(r.mains) == 0 {
		return
	}
	c := r.mains[0]
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k.mu.Lock()
		at, started, running := time.Now(), c.started, c.running
		var due []*probeRun
		if running {
			s := c.probes
			if s.startup != nil && !s.startup.ok {
				due = append(due, s.startup)
			} else {
				due = append(due, s.liveness, s.readiness)
			}
		}
		k.mu.Unlock()
		kill, changed := "", false
		for _, pr := range due {
			if pr == nil || at.Before(pr.due) {
				continue
			}
			ok, msg := httpProbe(ctx, pr.p, k.cfg.Address.String())
			k.mu.Lock()
			if c.running && c.started.Equal(started) {
				changed = pr.record(time.Now(), ok) || changed
				switch {
				case pr.kind == "Startup" && !pr.ok && pr.fail >= defaulted(pr.p.FailureThreshold, 3):
					kill = "failed startup probe"
				case pr.kind == "Liveness" && !pr.ok:
					kill = "failed liveness probe"
				case pr.kind == "Startup" && pr.ok:
					for _, o := range []*probeRun{c.probes.readiness, c.probes.liveness} {
						if o != nil && o.due.Before(at) {
							o.due = at
						}
					}
				}
			}
			k.mu.Unlock()
			if !ok {
				k.cfg.Logs.Write(vmdisk.Kubelet, "static pod %s: %s probe failed: %s", sp.Name, pr.kind, msg)
			}
		}
		if kill != "" {
			k.cfg.Logs.Write(vmdisk.Kubelet, "static pod %s: container %s %s, will be restarted", sp.Name, c.spec.Name, kill)
			p.Kill()
		}
		if changed {
			k.kickMirror()
		}
	}
}

// httpProbe makes an HTTP, HTTPS or TCP probe for real, as the kubelet's
// prober does (no certificate checks); the VM's loopback is its host
// address. An exec probe cannot run and counts as passing.
func httpProbe(ctx context.Context, p *corev1.Probe, node string) (bool, string) {
	timeout := time.Duration(defaulted(p.TimeoutSeconds, 1)) * time.Second
	hostOf := func(h string) string {
		if h == "" || h == "127.0.0.1" || h == "localhost" {
			return node
		}
		return h
	}
	switch {
	case p.HTTPGet != nil:
		scheme := strings.ToLower(string(p.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		url := scheme + "://" + net.JoinHostPort(hostOf(p.HTTPGet.Host), p.HTTPGet.Port.String()) + p.HTTPGet.Path
		cl := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the kubelet's prober does not verify either
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := cl.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return true, ""
	case p.TCPSocket != nil:
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(hostOf(p.TCPSocket.Host), p.TCPSocket.Port.String()))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	}
	return true, ""
}
