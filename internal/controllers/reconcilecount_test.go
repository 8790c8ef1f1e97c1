package controllers_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
)

// reconcileCounter counts the reconciles of one manager's controllers.
// controller-runtime's reconcile metrics are process-wide, and every test's
// manager names its controllers alike, so a test that reads them must run
// alone; a test counting with its own manager's counter can run beside the
// others. The counts come from the lines the controller logs around each
// reconcile, through the manager's logger (controller-runtime v0.24.1
// pkg/internal/controller/controller.go, reconcileHandler: "Reconciling" at
// V(5) before the reconcile, then "Reconcile successful", "Reconcile done,
// requeueing…" or the error "Reconciler error", where it also counts
// controller_runtime_reconcile_total; pkg/builder/controller.go gives the
// logger the "controller" and "reconcileID" values).
type reconcileCounter struct {
	mu       sync.Mutex
	started  map[string]int
	finished map[string]int
	// running holds when each reconcile under way started; worked sums
	// the seconds of those that returned, per controller.
	running map[string]time.Time
	worked  map[string]float64
}

func newReconcileCounter() *reconcileCounter {
	return &reconcileCounter{started: map[string]int{}, finished: map[string]int{}, running: map[string]time.Time{}, worked: map[string]float64{}}
}

// Finished is how many reconciles the controller has returned from, as
// controller_runtime_reconcile_total counts them.
func (c *reconcileCounter) Finished(controller string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return float64(c.finished[controller])
}

// Active is how many of the controller's workers are in a reconcile, as
// controller_runtime_active_workers shows them.
func (c *reconcileCounter) Active(controller string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return float64(c.started[controller] - c.finished[controller])
}

// Worked is the seconds the controller's returned reconciles took, as
// controller_runtime_reconcile_time_seconds sums them.
func (c *reconcileCounter) Worked(controller string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.worked[controller]
}

func (c *reconcileCounter) start(controller, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started[controller]++
	c.running[id] = time.Now()
}

func (c *reconcileCounter) finish(controller, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finished[controller]++
	if at, ok := c.running[id]; ok {
		c.worked[controller] += time.Since(at).Seconds()
		delete(c.running, id)
	}
}

// logger is a logger for the manager that counts into c and passes every
// line on to next as next's own level allows.
func (c *reconcileCounter) logger(next logr.Logger) logr.Logger {
	return logr.New(&countingSink{c: c, next: next.GetSink()})
}

// countingSink is the logr sink behind reconcileCounter.logger.
type countingSink struct {
	c          *reconcileCounter
	next       logr.LogSink
	controller string
	id         string
}

func (s *countingSink) Init(info logr.RuntimeInfo) { s.next.Init(info) }

// Enabled is true at every level: the lines it counts are at V(5).
func (s *countingSink) Enabled(int) bool { return true }

func (s *countingSink) Info(level int, msg string, kv ...any) {
	if s.controller != "" {
		switch {
		case msg == "Reconciling":
			s.c.start(s.controller, s.id)
		case msg == "Reconcile successful" || strings.HasPrefix(msg, "Reconcile done"):
			s.c.finish(s.controller, s.id)
		}
	}
	if s.next.Enabled(level) {
		s.next.Info(level, msg, kv...)
	}
}

func (s *countingSink) Error(err error, msg string, kv ...any) {
	if s.controller != "" && msg == "Reconciler error" {
		s.c.finish(s.controller, s.id)
	}
	s.next.Error(err, msg, kv...)
}

func (s *countingSink) WithValues(kv ...any) logr.LogSink {
	out := *s
	for i := 0; i+1 < len(kv); i += 2 {
		switch kv[i] {
		case "controller":
			out.controller, _ = kv[i+1].(string)
		case "reconcileID":
			out.id = fmt.Sprint(kv[i+1])
		}
	}
	out.next = s.next.WithValues(kv...)
	return &out
}

func (s *countingSink) WithName(name string) logr.LogSink {
	out := *s
	out.next = s.next.WithName(name)
	return &out
}

// startCountedControllers is startControllersWith with a counter of the
// manager's reconciles.
func startCountedControllers(t *testing.T, cfg endpoint.Config, change func(*controllers.Options)) (stop func(), rc *reconcileCounter) {
	t.Helper()
	rc = newReconcileCounter()
	mo := managerOptions(t)
	mo.Logger = rc.logger(ctrl.Log)
	return startManagerWith(t, mo, cfg, change), rc
}
