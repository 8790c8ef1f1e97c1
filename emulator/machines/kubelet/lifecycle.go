package kubelet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// StartCheck is asked before each start of a container. An error is the
// container's process failing as it starts: the container terminates with
// exit code 1, reason "Error" and the error's text as its message, and the
// pod's restartPolicy and the crash-loop back-off apply, as when a real
// process exits at once for want of what it needs.
//
// Three errors say more of the process (see emulator/machines/containerruntime):
// a *StartFailure is a process the runtime could not start (exit code
// 128, reason StartError); an *Exited a process that ended at once with
// its own exit code; a *Waiting a process that runs but waits for
// something not there yet: the container is running, an init container
// does not complete, what its image provides does not count, and the
// check is asked again after WaitRecheck.
type StartCheck func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, img *Pulled) error

// StartFailure is a process the container runtime could not start.
type StartFailure struct{ Message string }

func (e *StartFailure) Error() string { return e.Message }

// Exited is a process that ended as it started, with Code.
type Exited struct {
	Code    int32
	Message string
}

func (e *Exited) Error() string { return e.Message }

// Ended is a process that ran and ended by itself with Code (a command
// that completes): the container starts, then terminates with its code,
// Completed for 0 and Error otherwise, and the restart policy applies.
// Output is what it wrote: the container's log.
type Ended struct {
	Code   int32
	Output []string
}

func (e *Ended) Error() string { return fmt.Sprintf("exited with code %d", e.Code) }

// RunsUntilStopped is a process that never ends by itself (pause): the
// container runs until it is stopped, whatever the restart policy and
// the run-time annotations.
type RunsUntilStopped struct{}

func (e *RunsUntilStopped) Error() string { return "runs until stopped" }

// Waiting is a process that runs and waits. Every is how often the
// process itself looks again (its script's sleep); zero is WaitRecheck.
type Waiting struct {
	Message string
	Every   time.Duration
	// Memory is what the process holds until it is looked at again (a
	// connect it waits in): the next look's context carries it
	// (ProcessMemory).
	Memory any
}

func (e *Waiting) Error() string { return e.Message }

type memoryKey struct{}

// ProcessMemory is what the container's process a StartCheck asks about
// held when it last waited (Waiting.Memory); nil at its start.
func ProcessMemory(ctx context.Context) any { return ctx.Value(memoryKey{}) }

// WaitRecheck is how often a waiting process is looked at again when it
// does not say how often it looks.
const WaitRecheck = 3 * time.Second

func (e *Waiting) recheckAt(now time.Time) time.Time {
	if e.Every > 0 {
		return now.Add(e.Every)
	}
	return now.Add(WaitRecheck)
}

// What the simulation does with a container, which runs no process:
//   - an init container completes (exit 0) as soon as it starts;
//   - a container of a pod with restartPolicy Always runs until it is
//     stopped (pod deleted, liveness or startup probe failure);
//   - a container of a pod with restartPolicy Never or OnFailure (a Job's)
//     runs for RunSecondsAnnotation seconds (DefaultRunSeconds) and exits
//     with ExitCodeAnnotation (0), the pod's annotations saying what the
//     real process would do.
const (
	RunSecondsAnnotation = "emulator.winkube.dev/run-seconds"
	ExitCodeAnnotation   = "emulator.winkube.dev/exit-code"
	DefaultRunSeconds    = 2
)

// The kubelet's crash-loop back-off: the first restart is at once, the next
// after 10s, doubling up to 5 minutes; a container that ran without
// failing for twice the cap starts over.
const (
	initialBackoff = 10 * time.Second
	maxBackoff     = 5 * time.Minute
)

// exitKilled is what a container stopped by the kubelet reports: SIGTERM,
// which a process without a handler dies of (128+15).
const exitKilled = 143

// podRun is what the kubelet's runtime knows of a pod's containers.
type podRun struct {
	pod *corev1.Pod
	// podIP and hostIP are where probes connect; images what each
	// container runs, with the ports its process serves.
	podIP, hostIP string
	images        map[string]*Pulled
	// net is where the containers' servers listen; nil runs none (a
	// static pod's processes are real).
	net   *podNet
	inits []*ctrRun
	mains []*ctrRun
	// events are what happened since the caller last took them.
	events []runEvent
	// volumes are the pod's CSI volumes published into its folder, by
	// the pod's volume name; volumesSince is when the kubelet began to
	// wait for the rest.
	volumes      map[string]*csiVolume
	volumesSince time.Time
	// probing is when the kubelet began to probe the pod's containers:
	// the sync that first started them (see newProbeSet).
	probing time.Time
}

type runEvent struct{ typ, reason, msg string }

type ctrRun struct {
	spec     corev1.Container
	init     bool
	restarts int32
	running  bool
	started  time.Time
	// exitAt is when a run-to-completion container's process ends.
	exitAt   time.Time
	exitCode int32
	// output is what the last run's process wrote, when a model knows.
	output []string
	// term is the final state of a container that will not run again;
	// last the previous run's end.
	term, last *corev1.ContainerStateTerminated
	// waitUntil is the end of the crash-loop back-off.
	waitUntil time.Time
	waitMsg   string
	backoff   time.Duration
	backoffAt time.Time
	probes    probeSet
	// waiting is what the running process waits for ("" when it does
	// not); recheck when it is looked at again, memory what it holds
	// until then.
	waiting string
	recheck time.Time
	memory  any
	// servers are the ports the running process listens on.
	servers []ctrServer
}

type runEnv struct {
	ctx   context.Context
	check StartCheck
	exec  ExecProbe
}

// ExecProbe runs a container's exec probe command (see Config.ExecProbe).
type ExecProbe func(pod *corev1.Pod, container string, command []string) (handled, ok bool, msg string)

func newPodRun(pod *corev1.Pod) *podRun {
	r := &podRun{pod: pod, volumes: map[string]*csiVolume{}}
	for _, c := range pod.Spec.InitContainers {
		r.inits = append(r.inits, &ctrRun{spec: c, init: true})
	}
	for _, c := range pod.Spec.Containers {
		// A kubelet starting again (the machine rebooted) counts on from
		// the restarts the pod's status shows.
		run := &ctrRun{spec: c}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == c.Name {
				run.restarts = cs.RestartCount
			}
		}
		r.mains = append(r.mains, run)
	}
	return r
}

func (r *podRun) event(typ, reason, format string, a ...any) {
	r.events = append(r.events, runEvent{typ, reason, fmt.Sprintf(format, a...)})
}

func (r *podRun) policy() corev1.RestartPolicy {
	if r.pod.Spec.RestartPolicy == "" {
		return corev1.RestartPolicyAlways
	}
	return r.pod.Spec.RestartPolicy
}

// runFor is how long a run-to-completion container runs, and its exit code.
func (r *podRun) runFor() (time.Duration, int32) {
	secs, code := DefaultRunSeconds, 0
	if v, err := strconv.Atoi(r.pod.Annotations[RunSecondsAnnotation]); err == nil && v >= 0 {
		secs = v
	}
	if v, err := strconv.Atoi(r.pod.Annotations[ExitCodeAnnotation]); err == nil {
		code = v
	}
	return time.Duration(secs) * time.Second, int32(code)
}

// advance moves the pod's containers to what they are at now and returns
// when something next happens (zero: nothing will by itself).
func (r *podRun) advance(now time.Time, env runEnv) time.Time {
	var next time.Time
	soon := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if r.failed() {
		return next
	}
	if r.probing.IsZero() {
		r.probing = now
	}
	// Init containers run one after the other, each to completion.
	for _, c := range r.inits {
		if c.term != nil && c.term.ExitCode == 0 {
			continue
		}
		if c.term != nil || now.Before(c.waitUntil) {
			soon(c.waitUntil)
			return next
		}
		if c.running && c.waiting != "" {
			if now.Before(c.recheck) {
				soon(c.recheck)
				return next
			}
			if !r.recheck(now, c, env) {
				soon(c.waitUntil)
				return next
			}
			if c.waiting != "" {
				soon(c.recheck)
				return next
			}
		} else if !r.start(now, c, env) {
			soon(c.waitUntil)
			return next
		} else if c.waiting != "" {
			soon(c.recheck)
			return next
		}
		if !c.exitAt.IsZero() && c.exitCode != 0 {
			// Its command ended with a code (Ended).
			r.exit(now, c, c.exitCode, "Error", "")
			soon(c.waitUntil)
			return next
		}
		r.exit(now, c, 0, "Completed", "")
	}
	for _, c := range r.mains {
		for guard := 0; guard < 3; guard++ {
			if c.term != nil {
				break
			}
			if !c.running {
				if now.Before(c.waitUntil) {
					soon(c.waitUntil)
					break
				}
				if !r.start(now, c, env) {
					continue // exited at once; restart at once or wait
				}
			}
			if c.waiting != "" && !now.Before(c.recheck) {
				if !r.recheck(now, c, env) {
					continue
				}
			}
			if c.waiting != "" {
				soon(c.recheck)
			}
			if !c.exitAt.IsZero() && !now.Before(c.exitAt) {
				reason := "Completed"
				if c.exitCode != 0 {
					reason = "Error"
				}
				r.exit(now, c, c.exitCode, reason, "")
				continue
			}
			soon(c.exitAt)
			if kill := r.runProbes(now, c, env.exec); kill != "" {
				r.event(corev1.EventTypeNormal, "Killing", "Container %s %s, will be restarted", c.spec.Name, kill)
				r.exit(now, c, exitKilled, "Error", "")
				continue
			}
			soon(c.probes.next())
			break
		}
	}
	return next
}

// start starts a container's process; false when it failed at once.
func (r *podRun) start(now time.Time, c *ctrRun, env runEnv) bool {
	c.waitUntil, c.waitMsg = time.Time{}, ""
	c.waiting, c.memory = "", nil
	var ended *Ended
	var forever *RunsUntilStopped
	if env.check != nil {
		err := env.check(env.ctx, r.pod, &c.spec, r.images[c.spec.Name])
		var wait *Waiting
		switch {
		case errors.As(err, &wait):
			c.waiting, c.recheck, c.memory = wait.Message, wait.recheckAt(now), wait.Memory
		case errors.As(err, &ended), errors.As(err, &forever):
		case err != nil:
			c.started = now
			r.failStart(now, c, err)
			return false
		}
	}
	c.running, c.started = true, now
	c.exitAt, c.exitCode = time.Time{}, 0
	switch {
	case ended != nil:
		// The process's own end, whatever the restart policy.
		c.exitAt, c.exitCode, c.output = now, ended.Code, ended.Output
	case forever != nil:
	case !c.init && r.policy() != corev1.RestartPolicyAlways:
		d, code := r.runFor()
		c.exitAt, c.exitCode = now.Add(d), code
	}
	c.probes = newProbeSet(&c.spec, now, r.probing)
	r.event(corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	r.openPorts(c)
	return true
}

// failStart records a process that did not get going: the runtime's
// StartError (exit code 128) or the process's own exit.
func (r *podRun) failStart(now time.Time, c *ctrRun, err error) {
	var sf *StartFailure
	var ex *Exited
	switch {
	case errors.As(err, &sf):
		r.event(corev1.EventTypeWarning, "Failed", "Error: %s", sf.Message)
		r.exit(now, c, 128, "StartError", sf.Message)
	case errors.As(err, &ex):
		r.event(corev1.EventTypeWarning, "Failed", "Error: container %s exited with code %d: %s", c.spec.Name, ex.Code, ex.Message)
		r.exit(now, c, ex.Code, "Error", ex.Message)
	default:
		r.event(corev1.EventTypeWarning, "Failed", "Error: container %s: %v", c.spec.Name, err)
		r.exit(now, c, 1, "Error", err.Error())
	}
}

// recheck looks again at a waiting process: false when it ended.
func (r *podRun) recheck(now time.Time, c *ctrRun, env runEnv) bool {
	err := env.check(context.WithValue(env.ctx, memoryKey{}, c.memory), r.pod, &c.spec, r.images[c.spec.Name])
	c.memory = nil
	var wait *Waiting
	var ended *Ended
	switch {
	case errors.As(err, &wait):
		c.waiting, c.recheck, c.memory = wait.Message, wait.recheckAt(now), wait.Memory
		return true
	case errors.As(err, &ended):
		c.waiting = ""
		c.exitAt, c.exitCode, c.output = now, ended.Code, ended.Output
		return true
	case err != nil:
		r.failStart(now, c, err)
		return false
	}
	c.waiting = ""
	return true
}

// exit ends a container's run and applies the restart policy.
func (r *podRun) exit(now time.Time, c *ctrRun, code int32, reason, msg string) {
	t := &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, StartedAt: metav1.NewTime(c.started), FinishedAt: metav1.NewTime(now)}
	c.running, c.waiting, c.memory = false, "", nil
	c.closePorts()
	restart := false
	switch r.policy() {
	case corev1.RestartPolicyAlways:
		restart = !c.init || code != 0
	case corev1.RestartPolicyOnFailure:
		restart = code != 0
	}
	if !restart {
		c.term = t
		return
	}
	c.last = t
	c.restarts++
	d := c.nextBackoff(now)
	c.waitUntil = now.Add(d)
	c.waitMsg = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.spec.Name, r.pod.Name, r.pod.Namespace, r.pod.UID)
	if d > 0 {
		r.event(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", c.spec.Name, r.pod.Name, r.pod.Namespace, r.pod.UID)
	}
}

// nextBackoff is the wait before the next start, as the kubelet's
// back-off counts it.
func (c *ctrRun) nextBackoff(now time.Time) time.Duration {
	if c.backoff > 0 && now.Sub(c.backoffAt) > 2*maxBackoff {
		c.backoff = 0
	}
	d := c.backoff
	c.backoff = min(max(2*c.backoff, initialBackoff), maxBackoff)
	c.backoffAt = now
	return d
}

func (r *podRun) failed() bool {
	if r.policy() != corev1.RestartPolicyNever {
		return false
	}
	for _, c := range r.inits {
		if c.term != nil && c.term.ExitCode != 0 {
			return true
		}
	}
	return false
}

func (r *podRun) running() bool {
	for _, c := range r.mains {
		if c.running {
			return true
		}
	}
	return false
}

// phase is the pod's phase from its containers, as the kubelet computes it.
func (r *podRun) phase() corev1.PodPhase {
	if r.failed() {
		return corev1.PodFailed
	}
	for _, c := range r.inits {
		if c.term == nil || c.term.ExitCode != 0 {
			return corev1.PodPending
		}
	}
	done, ok := 0, true
	for _, c := range r.mains {
		if c.term != nil {
			done++
			ok = ok && c.term.ExitCode == 0
		}
	}
	switch {
	case done < len(r.mains):
		return corev1.PodRunning
	case ok:
		return corev1.PodSucceeded
	default:
		return corev1.PodFailed
	}
}

func (c *ctrRun) ready() bool { return c.running && c.probes.started() && c.probes.ready() }

// status is the container's status as the runtime reports it.
func (c *ctrRun) status(pod *corev1.Pod, img *Pulled) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, RestartCount: c.restarts, ContainerID: containerID(pod, c.spec.Name)}
	if img != nil {
		cs.ImageID = img.ImageID
	}
	if c.last != nil {
		cs.LastTerminationState.Terminated = c.last.DeepCopy()
	}
	switch {
	case c.running:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.started)}
		cs.Started = ptr.To(c.probes.started())
		cs.Ready = c.ready()
	case c.term != nil:
		t := c.term.DeepCopy()
		t.ContainerID = cs.ContainerID
		cs.State.Terminated = t
		cs.Started = ptr.To(false)
		cs.Ready = c.init && t.ExitCode == 0
	case !c.waitUntil.IsZero():
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: c.waitMsg}
		cs.Started = ptr.To(false)
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		cs.Started = ptr.To(false)
	}
	return cs
}

// fill writes the pod's phase, container statuses and conditions.
func (r *podRun) fill(s *corev1.PodStatus) {
	now := metav1.Now()
	s.InitContainerStatuses, s.ContainerStatuses = nil, nil
	for _, c := range r.inits {
		s.InitContainerStatuses = append(s.InitContainerStatuses, c.status(r.pod, r.images[c.spec.Name]))
	}
	allReady := true
	for _, c := range r.mains {
		s.ContainerStatuses = append(s.ContainerStatuses, c.status(r.pod, r.images[c.spec.Name]))
		allReady = allReady && c.ready()
	}
	s.Phase = r.phase()
	initialized := s.Phase != corev1.PodPending
	cond := func(t corev1.PodConditionType, v bool, reason string) {
		status := corev1.ConditionFalse
		if v {
			status, reason = corev1.ConditionTrue, ""
		}
		setCondition(s, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now})
	}
	notReady := "ContainersNotReady"
	if s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed {
		notReady = "PodCompleted"
	}
	cond(corev1.PodReadyToStartContainers, s.Phase == corev1.PodPending || s.Phase == corev1.PodRunning, "")
	cond(corev1.PodInitialized, initialized, "ContainersNotInitialized")
	cond(corev1.ContainersReady, allReady && s.Phase == corev1.PodRunning, notReady)
	cond(corev1.PodReady, allReady && s.Phase == corev1.PodRunning, notReady)
}
