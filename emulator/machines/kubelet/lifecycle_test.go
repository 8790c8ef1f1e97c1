package kubelet

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func lifecyclePod(t *testing.T, policy corev1.RestartPolicy, annotations map[string]string, c corev1.Container) *podRun {
	if c.Name == "" {
		c.Name = "app"
	}
	if c.Image == "" {
		c.Image = "docker.io/library/nginx:1.27"
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-1", Annotations: annotations},
		Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{c}}}
	r := newPodRun(pod)
	r.podIP, r.hostIP = "192.168.1.5", "127.0.10.4"
	r.images = map[string]*Pulled{c.Name: {ImageID: "img", Listens: []string{"80/tcp"}}}
	// The pod's IP is served at a loopback address of its own, as the
	// runtime's PodAddress gives it.
	r.net = &podNet{addr: testAddress(t), node: "node-1", os: "Ubuntu 24.04.1 LTS (6.8.0-1021-azure)"}
	t.Cleanup(r.closeAll)
	return r
}

func statusOf(r *podRun) (*corev1.PodStatus, corev1.ContainerStatus) {
	s := &corev1.PodStatus{}
	r.fill(s)
	return s, s.ContainerStatuses[0]
}

func ready(s *corev1.PodStatus) bool {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasEvent(r *podRun, reason, text string) bool {
	for _, e := range r.events {
		if e.reason == reason && strings.Contains(e.msg, text) {
			return true
		}
	}
	return false
}

var env = runEnv{ctx: context.Background()}

// TestJobContainerRunsToCompletion: a Never pod's container runs its
// simulated time and exits 0; the pod Succeeds.
func TestJobContainerRunsToCompletion(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyNever, nil, corev1.Container{})
	next := r.advance(t0, env)
	if s, cs := statusOf(r); s.Phase != corev1.PodRunning || cs.State.Running == nil || !cs.Ready {
		t.Fatalf("started: phase %s, state %+v", s.Phase, cs.State)
	}
	if want := t0.Add(DefaultRunSeconds * time.Second); !next.Equal(want) {
		t.Fatalf("next event at %s, want the container's exit at %s", next, want)
	}
	if next = r.advance(next, env); !next.IsZero() {
		t.Errorf("a finished pod has more to do at %s", next)
	}
	s, cs := statusOf(r)
	if s.Phase != corev1.PodSucceeded || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || cs.State.Terminated.Reason != "Completed" || ready(s) {
		t.Fatalf("after the run: phase %s, state %+v, ready %v", s.Phase, cs.State, ready(s))
	}
}

// TestNeverFailingContainerFailsThePod: exit code 3 with restartPolicy
// Never fails the pod, no restart.
func TestNeverFailingContainerFailsThePod(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyNever, map[string]string{ExitCodeAnnotation: "3", RunSecondsAnnotation: "0"}, corev1.Container{})
	r.advance(t0, env)
	s, cs := statusOf(r)
	if s.Phase != corev1.PodFailed || cs.RestartCount != 0 || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 || cs.State.Terminated.Reason != "Error" {
		t.Fatalf("phase %s, restarts %d, state %+v", s.Phase, cs.RestartCount, cs.State)
	}
}

// TestOnFailureRestartsWithBackOff: an OnFailure container that keeps
// failing restarts at once, then after 10s, 20s, 40s..., capped at 5m.
func TestOnFailureRestartsWithBackOff(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyOnFailure, map[string]string{ExitCodeAnnotation: "1", RunSecondsAnnotation: "1"}, corev1.Container{})
	now := t0
	var waits []time.Duration
	for range 20 {
		next := r.advance(now, env)
		_, cs := statusOf(r)
		if cs.State.Waiting != nil {
			if cs.State.Waiting.Reason != "CrashLoopBackOff" || !strings.Contains(cs.State.Waiting.Message, "restarting failed container=app") {
				t.Fatalf("waiting %+v", cs.State.Waiting)
			}
			waits = append(waits, next.Sub(now))
			if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
				t.Fatalf("last state %+v", cs.LastTerminationState)
			}
		}
		now = next
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second}
	if len(waits) < len(want) {
		t.Fatalf("back-offs %v", waits)
	}
	for i, w := range want {
		if waits[i] != w {
			t.Fatalf("back-offs %v, want %v first", waits, want)
		}
	}
	s, cs := statusOf(r)
	if s.Phase != corev1.PodRunning || cs.RestartCount < 6 {
		t.Errorf("phase %s, restarts %d", s.Phase, cs.RestartCount)
	}
}

// TestStartCheckFailureCrashLoops: a failing start check terminates the
// container with exit code 1 and the check's message, restarts it with
// the back-off, and lets it run once the check passes.
func TestStartCheckFailureCrashLoops(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{})
	broken := true
	e := runEnv{ctx: context.Background(), check: func(_ context.Context, _ *corev1.Pod, c *corev1.Container, _ *Pulled) error {
		if broken {
			return errors.New("no azure.json: /etc/kubernetes/azure.json: no such file")
		}
		return nil
	}}
	next := r.advance(t0, e)
	s, cs := statusOf(r)
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.RestartCount != 2 || ready(s) {
		t.Fatalf("state %+v restarts %d", cs.State, cs.RestartCount)
	}
	last := cs.LastTerminationState.Terminated
	if last == nil || last.ExitCode != 1 || last.Reason != "Error" || !strings.Contains(last.Message, "azure.json") {
		t.Fatalf("last state %+v", last)
	}
	if !hasEvent(r, "Failed", "azure.json") || !hasEvent(r, "BackOff", "app") {
		t.Errorf("events %+v", r.events)
	}
	broken = false
	r.advance(next, e)
	if s, cs := statusOf(r); cs.State.Running == nil || !ready(s) || cs.RestartCount != 2 {
		t.Fatalf("after the check passes: %+v ready %v", cs.State, ready(s))
	}
}

// TestReadinessProbeFollowsWhatListens: a probe on a port the image does
// not serve is refused and keeps the container not ready; one on its
// port makes it ready after the initial delay and successThreshold.
func TestReadinessProbeFollowsWhatListens(t *testing.T) {
	probe := func(port int) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(port)}},
			InitialDelaySeconds: 5, PeriodSeconds: 3, SuccessThreshold: 2}
	}
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{ReadinessProbe: probe(8080)})
	now := t0
	for range 6 {
		now = r.advance(now, env)
	}
	if s, cs := statusOf(r); cs.Ready || ready(s) || cs.State.Running == nil {
		t.Fatalf("ready with nothing listening on 8080: %+v", cs)
	}
	if !hasEvent(r, "Unhealthy", `Readiness probe failed: Get "http://192.168.1.5:8080/healthz": dial tcp 192.168.1.5:8080: connect: connection refused`) {
		t.Errorf("events %+v", r.events)
	}

	r = lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{ReadinessProbe: probe(80)})
	next := r.advance(t0, env)
	if _, cs := statusOf(r); cs.Ready || !next.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("ready before the initial delay (%v), next probe at %s", cs.Ready, next)
	}
	next = r.advance(next, env)
	if _, cs := statusOf(r); cs.Ready {
		t.Fatal("ready after one success with successThreshold 2")
	}
	r.advance(next, env)
	if s, cs := statusOf(r); !cs.Ready || !ready(s) {
		t.Fatal("not ready after two successes")
	}
}

// TestLivenessFailureRestarts: failureThreshold failed liveness probes
// kill the container, which restarts.
func TestLivenessFailureRestarts(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{LivenessProbe: &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(9999)}}, PeriodSeconds: 1, FailureThreshold: 2}})
	now := t0
	for range 2 {
		now = r.advance(now, env)
	}
	_, cs := statusOf(r)
	if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != exitKilled {
		t.Fatalf("restarts %d last %+v", cs.RestartCount, cs.LastTerminationState)
	}
	if !hasEvent(r, "Killing", "failed liveness probe") {
		t.Errorf("events %+v", r.events)
	}
}

// TestStartupProbeGatesTheOthers: a startup probe that never passes kills
// the container; readiness is not probed before it passes.
func TestStartupProbeGatesTheOthers(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyNever, map[string]string{RunSecondsAnnotation: "3600"}, corev1.Container{
		StartupProbe:   &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(81)}}, PeriodSeconds: 1, FailureThreshold: 3},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(80)}}, PeriodSeconds: 1},
	})
	now := t0
	for range 4 {
		now = r.advance(now, env)
	}
	s, cs := statusOf(r)
	if s.Phase != corev1.PodFailed || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != exitKilled || hasEvent(r, "Unhealthy", "Readiness") {
		t.Fatalf("phase %s state %+v events %+v", s.Phase, cs.State, r.events)
	}
}

// TestExecProbeIsNotRun: an exec probe cannot run in a container without a
// process; it counts as passing and the kubelet says so.
func TestExecProbeIsNotRun(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{ReadinessProbe: &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/calico-node", "-felix-ready"}}}}})
	r.advance(t0, env)
	if s, _ := statusOf(r); !ready(s) || !hasEvent(r, "ProbeNotRun", "calico-node -felix-ready") {
		t.Fatalf("ready %v events %+v", ready(s), r.events)
	}
}

// TestModelledExecProbeDecides: an exec probe whose command the runtime
// models (Felix's -felix-ready) gets the command's result: failing, the
// container stays running and not Ready, with the Unhealthy event; once
// it passes, Ready.
func TestModelledExecProbeDecides(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{ReadinessProbe: &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/calico-node", "-felix-ready"}}}, FailureThreshold: 1}})
	synced := false
	e := runEnv{ctx: context.Background(), exec: func(_ *corev1.Pod, _ string, cmd []string) (bool, bool, string) {
		if cmd[len(cmd)-1] != "-felix-ready" {
			return false, false, ""
		}
		if !synced {
			return true, false, "calico-node is not ready: not in sync with the datastore"
		}
		return true, true, ""
	}}
	r.advance(t0, e)
	r.advance(t0.Add(time.Second), e)
	if s, cs := statusOf(r); ready(s) || cs.State.Running == nil || !hasEvent(r, "Unhealthy", "not in sync") || hasEvent(r, "ProbeNotRun", "") {
		t.Fatalf("ready %v state %+v events %+v", ready(s), cs.State, r.events)
	}
	synced = true
	r.advance(t0.Add(20*time.Second), e)
	if s, _ := statusOf(r); !ready(s) {
		t.Fatalf("not Ready once the probe passes: events %+v", r.events)
	}
}

// TestReadinessProbeRetriesOnTheWorkersTicker: a readiness probe that
// fails when its container starts is tried again at the next tick of the
// kubelet's prober worker, whose ticker runs from the pod's first sync,
// not a whole period after the failed probe: a container that waited 3 s
// for its init container and failed its first probe is probed again 7 s
// later with a 10 s period (prober/worker.go run, see newProbeSet).
func TestReadinessProbeRetriesOnTheWorkersTicker(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{ReadinessProbe: &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/calico-node", "-felix-ready"}}}, PeriodSeconds: 10}})
	r.inits = []*ctrRun{{spec: corev1.Container{Name: "install-cni"}, init: true}}
	initWaits, probes := true, 0
	e := runEnv{ctx: context.Background(),
		check: func(_ context.Context, _ *corev1.Pod, c *corev1.Container, _ *Pulled) error {
			if c.Name == "install-cni" && initWaits {
				return &Waiting{Message: "waiting for the API server"}
			}
			return nil
		},
		// Felix is in sync just after its container's first probe.
		exec: func(*corev1.Pod, string, []string) (bool, bool, string) {
			if probes++; probes == 1 {
				return true, false, "calico-node is not ready: not in sync with the datastore"
			}
			return true, true, ""
		}}
	next := r.advance(t0, e)
	if !next.Equal(t0.Add(WaitRecheck)) {
		t.Fatalf("the init container is looked at again at %s, want %s", next.Sub(t0), WaitRecheck)
	}
	initWaits = false
	next = r.advance(next, e)
	if s, cs := statusOf(r); ready(s) || cs.State.Running == nil || probes != 1 {
		t.Fatalf("at the container's start: ready %v, state %+v, %d probes, want one failed probe", ready(s), cs.State, probes)
	}
	if !next.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("the readiness probe is tried again %s after the pod's first sync, want at the worker's next tick, 10s", next.Sub(t0))
	}
	r.advance(next, e)
	if s, _ := statusOf(r); !ready(s) || probes != 2 {
		t.Fatalf("not Ready after the probe at the worker's tick (%d probes): events %+v", probes, r.events)
	}
}

// TestLivenessProbeWaitsForTheWorkersTick: a liveness probe gets no run
// by hand when its container starts: its first probe is at the worker's
// first tick after the container started (prober/worker.go run).
func TestLivenessProbeWaitsForTheWorkersTick(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{LivenessProbe: &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(80)}}, PeriodSeconds: 10}})
	r.inits = []*ctrRun{{spec: corev1.Container{Name: "init"}, init: true}}
	initWaits := true
	e := runEnv{ctx: context.Background(), check: func(_ context.Context, _ *corev1.Pod, c *corev1.Container, _ *Pulled) error {
		if c.Name == "init" && initWaits {
			return &Waiting{Message: "waiting"}
		}
		return nil
	}}
	next := r.advance(t0, e)
	initWaits = false
	next = r.advance(next, e)
	if lv := r.mains[0].probes.liveness; lv.succ+lv.fail != 0 || !next.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("the container started at %s: %d liveness probes at its start, the next at %s; want none before the worker's tick at 10s", WaitRecheck, lv.succ+lv.fail, next.Sub(t0))
	}
}

// TestWaitingProcessLooksAtItsOwnPace: a process that says how often it
// looks again for what it waits for (a script's Start-Sleep 1) is looked
// at again then, not at the runtime's WaitRecheck: it goes on within a
// second of what it waited for appearing, as the script would.
func TestWaitingProcessLooksAtItsOwnPace(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{})
	r.inits = []*ctrRun{{spec: corev1.Container{Name: "init"}, init: true}}
	e := runEnv{ctx: context.Background(), check: func(context.Context, *corev1.Pod, *corev1.Container, *Pulled) error {
		return &Waiting{Message: "Waiting for Calico initialisation to finish...", Every: time.Second}
	}}
	if next := r.advance(t0, e); !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("a waiting init container that looks every second is looked at again after %s", next.Sub(t0))
	}
	r = lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{})
	if next := r.advance(t0, e); !next.Equal(t0.Add(time.Second)) || r.mains[0].waiting == "" {
		t.Fatalf("a waiting container that looks every second is looked at again after %s (waiting %q)", next.Sub(t0), r.mains[0].waiting)
	}
}

// TestWaitingProcessKeepsItsMemory: what a waiting process holds (a
// connect it waits in) is handed back at its next look, and only to the
// run that held it: a restarted process starts with nothing.
func TestWaitingProcessKeepsItsMemory(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{})
	var seen []any
	looks := 0
	e := runEnv{ctx: context.Background(), check: func(ctx context.Context, _ *corev1.Pod, _ *corev1.Container, _ *Pulled) error {
		seen = append(seen, ProcessMemory(ctx))
		looks++
		if looks == 3 {
			return errors.New("connect: connection timed out")
		}
		return &Waiting{Message: "connecting", Every: time.Second, Memory: looks}
	}}
	r.advance(t0, e)                    // starts: holds 1
	r.advance(t0.Add(time.Second), e)   // looks again: given 1, holds 2
	r.advance(t0.Add(2*time.Second), e) // given 2, fails: restarts at once, given nothing
	want := []any{nil, 1, 2, nil}
	if len(seen) != len(want) {
		t.Fatalf("looks given %v; want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("looks given %v; want %v", seen, want)
		}
	}
}

// TestInitContainersRunFirst: a failing init container of a Never pod
// fails the pod before the main containers start.
func TestInitContainersRunFirst(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyNever, nil, corev1.Container{})
	r.pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
	r.inits = []*ctrRun{{spec: r.pod.Spec.InitContainers[0], init: true}}
	e := runEnv{ctx: context.Background(), check: func(_ context.Context, _ *corev1.Pod, c *corev1.Container, _ *Pulled) error {
		if c.Name == "setup" {
			return errors.New("setup failed")
		}
		return nil
	}}
	r.advance(t0, e)
	s, cs := statusOf(r)
	if s.Phase != corev1.PodFailed || cs.State.Running != nil || s.InitContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("phase %s main %+v init %+v", s.Phase, cs.State, s.InitContainerStatuses)
	}
}

// TestBindFailureIsAnEvent: a port something else holds cannot be served;
// the kubelet says so as it would of a server that failed to bind, and a
// port the node's own process holds (hostNetwork) is left to it quietly.
func TestBindFailureIsAnEvent(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{Ports: []corev1.ContainerPort{{ContainerPort: 8443}, {ContainerPort: 6443}}})
	for _, port := range []string{"8443", "6443"} {
		ln, err := net.Listen("tcp", net.JoinHostPort(r.net.addr.String(), port))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
	}
	r.net.held = map[int32]bool{6443: true}
	r.advance(t0, env)
	if !hasEvent(r, "Failed", "cannot listen on port 8443") || hasEvent(r, "Failed", "6443") {
		t.Errorf("events %+v", r.events)
	}
	if !r.listening(80) || r.listening(8443) {
		t.Errorf("servers %+v", r.mains[0].servers)
	}
}

// TestProcessOutcomes: a process the runtime could not start ends with
// StartError and exit code 128; one that exits at once with its own code;
// a waiting main container runs but is looked at again, and a waiting
// init container keeps the pod initializing until its wait ends.
func TestProcessOutcomes(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{})
	e := runEnv{ctx: context.Background(), check: func(context.Context, *corev1.Pod, *corev1.Container, *Pulled) error {
		return &StartFailure{Message: `failed to start containerd task "app": failed to start host process: failed to create process: %1 is not a valid Win32 application.: unknown`}
	}}
	r.advance(t0, e)
	_, cs := statusOf(r)
	if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 128 || last.Reason != "StartError" || !strings.Contains(last.Message, "not a valid Win32 application") {
		t.Fatalf("start failure: %+v", cs)
	}
	if !hasEvent(r, "Failed", "Error: failed to start containerd task") {
		t.Errorf("events %+v", r.events)
	}

	r = lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{})
	e.check = func(context.Context, *corev1.Pod, *corev1.Container, *Pulled) error {
		return &Exited{Code: 9009, Message: "'x' is not recognized as an internal or external command"}
	}
	r.advance(t0, e)
	if _, cs := statusOf(r); cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 9009 || cs.State.Waiting == nil {
		t.Fatalf("exit: %+v", cs)
	}

	// A main container that waits: running, looked at again, and then
	// no longer waiting.
	r = lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{})
	waiting := true
	e.check = func(context.Context, *corev1.Pod, *corev1.Container, *Pulled) error {
		if waiting {
			return &Waiting{Message: "Waiting for HNS network Calico to be created..."}
		}
		return nil
	}
	next := r.advance(t0, e)
	if _, cs := statusOf(r); cs.State.Running == nil || r.mains[0].waiting == "" || next.Sub(t0) != WaitRecheck {
		t.Fatalf("waiting main container: %+v waiting %q next in %s", cs.State, r.mains[0].waiting, next.Sub(t0))
	}
	waiting = false
	r.advance(next, e)
	if r.mains[0].waiting != "" || !r.mains[0].running {
		t.Fatalf("after its wait: running %v waiting %q", r.mains[0].running, r.mains[0].waiting)
	}

	// An init container that waits keeps the pod Pending (Init:0/1).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-2"},
		Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "install-cni"}}, Containers: []corev1.Container{{Name: "app"}}}}
	r = newPodRun(pod)
	waiting = true
	next = r.advance(t0, e)
	s := &corev1.PodStatus{}
	r.fill(s)
	if s.Phase != corev1.PodPending || s.InitContainerStatuses[0].State.Running == nil || r.mains[0].running {
		t.Fatalf("waiting init container: phase %s init %+v", s.Phase, s.InitContainerStatuses[0].State)
	}
	waiting = false
	r.advance(next, e)
	r.fill(s)
	if s.Phase != corev1.PodRunning || s.InitContainerStatuses[0].State.Terminated == nil || s.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("after the init container's wait: phase %s init %+v", s.Phase, s.InitContainerStatuses[0].State)
	}
}

// TestCommandThatEndsEndsThePod: a process that ends by itself (a
// HostProcess `cmd /c exit 3`, `powershell -Command "exit 0"`) ends its
// container at once with its code, whatever the run-time annotations say:
// a Never pod Succeeds on 0 and Fails otherwise, an Always pod restarts
// it, and an init container's code decides whether the pod goes on.
func TestCommandThatEndsEndsThePod(t *testing.T) {
	endsWith := func(code int32) runEnv {
		return runEnv{ctx: context.Background(), check: func(context.Context, *corev1.Pod, *corev1.Container, *Pulled) error {
			return &Ended{Code: code}
		}}
	}
	for _, c := range []struct {
		code   int32
		phase  corev1.PodPhase
		reason string
	}{{0, corev1.PodSucceeded, "Completed"}, {3, corev1.PodFailed, "Error"}} {
		// The annotations would run it for an hour and exit 0.
		r := lifecyclePod(t, corev1.RestartPolicyNever, map[string]string{RunSecondsAnnotation: "3600"}, corev1.Container{})
		r.advance(t0, endsWith(c.code))
		s, cs := statusOf(r)
		if s.Phase != c.phase || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != c.code || cs.State.Terminated.Reason != c.reason || cs.RestartCount != 0 {
			t.Errorf("exit %d: phase %s state %+v restarts %d, want %s %s", c.code, s.Phase, cs.State, cs.RestartCount, c.phase, c.reason)
		}
		if !hasEvent(r, "Started", "Started container app") || hasEvent(r, "Failed", "") {
			t.Errorf("exit %d: events %+v, want Started and no Failed", c.code, r.events)
		}
	}
	r := lifecyclePod(t, corev1.RestartPolicyAlways, nil, corev1.Container{})
	r.advance(t0, endsWith(0))
	// Restarted at once, then in CrashLoopBackOff (the kubelet's back-off).
	if _, cs := statusOf(r); cs.RestartCount != 2 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.Reason != "Completed" ||
		cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" {
		t.Errorf("Always: %+v", cs)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-3"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, InitContainers: []corev1.Container{{Name: "setup"}}, Containers: []corev1.Container{{Name: "app"}}}}
	r = newPodRun(pod)
	r.advance(t0, endsWith(2))
	s := &corev1.PodStatus{}
	r.fill(s)
	if s.Phase != corev1.PodFailed || s.InitContainerStatuses[0].State.Terminated == nil || s.InitContainerStatuses[0].State.Terminated.ExitCode != 2 || r.mains[0].running {
		t.Errorf("init exit 2: phase %s init %+v", s.Phase, s.InitContainerStatuses[0].State)
	}
}

// TestPauseRunsUntilStopped: a process that never ends by itself (the
// pause image the [sig-windows] volumes specs run in a Never pod) keeps
// its container Running past the default run time.
func TestPauseRunsUntilStopped(t *testing.T) {
	r := lifecyclePod(t, corev1.RestartPolicyNever, nil, corev1.Container{})
	e := runEnv{ctx: context.Background(), check: func(context.Context, *corev1.Pod, *corev1.Container, *Pulled) error {
		return &RunsUntilStopped{}
	}}
	r.advance(t0, e)
	r.advance(t0.Add(time.Duration(DefaultRunSeconds+60)*time.Second), e)
	if s, cs := statusOf(r); s.Phase != corev1.PodRunning || cs.State.Running == nil {
		t.Errorf("phase %s state %+v, want Running", s.Phase, cs.State)
	}
}
