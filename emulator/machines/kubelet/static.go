package kubelet

import (
	"context"
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
}

// staticRun is a static pod's container as the kubelet sees its process.
func (k *Kubelet) staticRun(sp *corev1.Pod) *podRun {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.static[sp.Name]
	if !ok {
		r = newPodRun(sp)
		for _, c := range r.mains {
			// Started by the machine before the kubelet ran.
			c.running, c.started = true, now()
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
