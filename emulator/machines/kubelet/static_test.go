package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/winkube/winkube/internal/poll"
)

// fakeProcess exits when the test says so.
type fakeProcess struct {
	exits    chan int
	mu       sync.Mutex
	restarts int
}

func (p *fakeProcess) Wait(ctx context.Context) (int, string, bool) {
	select {
	case <-ctx.Done():
		return 0, "", false
	case code := <-p.exits:
		return code, fmt.Sprintf("E1123 scheduler: exiting with %d", code), true
	}
}

func (p *fakeProcess) Kill() {}

func (p *fakeProcess) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.restarts++
	return nil
}

// TestStaticPodFollowsItsProcess: a static pod's process that exits makes
// its mirror pod report the exit and the restart; one that keeps exiting
// waits in CrashLoopBackOff, not Ready.
func TestStaticPodFollowsItsProcess(t *testing.T) {
	sp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: "kube-system"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-scheduler", Image: "registry.k8s.io/kube-scheduler:v1.36.3"}}}}
	p := &fakeProcess{exits: make(chan int)}
	k := &Kubelet{cfg: Config{NodeName: "cp", Address: netip.MustParseAddr("127.0.10.4"), StaticPods: []*corev1.Pod{sp}},
		static: map[string]*podRun{}, kick: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.supervise(ctx, sp, p) }()
	defer func() { cancel(); <-done }()
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler-cp", Namespace: "kube-system", UID: "m-1"}, Spec: sp.Spec}

	if s := k.staticStatus(mirror); s.Phase != corev1.PodRunning || !ready(s) {
		t.Fatalf("a running process's pod: %s ready=%v", s.Phase, ready(s))
	}
	p.exits <- 1 // restarted at once
	poll.Until(t, 10*time.Second, func() string {
		s := k.staticStatus(mirror)
		cs := s.ContainerStatuses[0]
		if cs.RestartCount != 1 || cs.State.Running == nil || cs.LastTerminationState.Terminated == nil {
			return fmt.Sprintf("after one exit: %+v", cs)
		}
		if last := cs.LastTerminationState.Terminated; last.ExitCode != 1 || !strings.Contains(last.Message, "exiting with 1") {
			return fmt.Sprintf("last state %+v", last)
		}
		return ""
	})
	p.exits <- 137 // within the back-off now
	poll.Until(t, 10*time.Second, func() string {
		s := k.staticStatus(mirror)
		cs := s.ContainerStatuses[0]
		if ready(s) || cs.RestartCount != 2 || cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.LastTerminationState.Terminated.ExitCode != 137 {
			return fmt.Sprintf("after a second exit: ready=%v %+v", ready(s), cs)
		}
		return ""
	})
}

// TestStaticPodReadinessFollowsItsProbe: a static pod whose process
// answers its readiness probe with an error is not Ready until it answers
// with success; the probe reaches the process for real.
func TestStaticPodReadinessFollowsItsProbe(t *testing.T) {
	// Its two seconds are the probe's period (1 s, the API's least) twice;
	// its kubelet and listener are its own: it waits beside the package's
	// other parallel tests.
	t.Parallel()
	var healthy atomic.Bool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && healthy.Load() {
			fmt.Fprint(w, "ok")
			return
		}
		http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
	}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	sp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver", Namespace: "kube-system"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.36.3",
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(port)}}, PeriodSeconds: 1, FailureThreshold: 3}}}}}
	p := &fakeProcess{exits: make(chan int)}
	k := &Kubelet{cfg: Config{NodeName: "cp", Address: netip.MustParseAddr("127.0.0.1"), StaticPods: []*corev1.Pod{sp}},
		static: map[string]*podRun{}, kick: make(chan struct{}, 1)}
	readiness := k.staticRun(sp).mains[0].probes.readiness
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.probeStatic(ctx, sp, p) }()
	defer func() { cancel(); <-done }()
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-cp", Namespace: "kube-system", UID: "m-2"}, Spec: sp.Spec}
	poll.Until(t, 20*time.Second, func() string {
		k.mu.Lock()
		probed := readiness.fail > 0
		k.mu.Unlock()
		if !probed {
			return "not probed yet"
		}
		return ""
	})
	if s := k.staticStatus(mirror); ready(s) {
		t.Fatal("Ready while /readyz fails")
	}
	healthy.Store(true)
	poll.Until(t, 20*time.Second, func() string {
		if s := k.staticStatus(mirror); !ready(s) {
			return "not Ready with /readyz answering ok"
		}
		return ""
	})
}
