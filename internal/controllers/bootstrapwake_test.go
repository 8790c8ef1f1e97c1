package controllers_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
)

// TestBootstrapFailedMachineStaysPut: a machine whose bootstrap failed,
// woken again and again (anything does: its Machine, its Cluster, an
// annotation), neither rewrites its Ready condition nor wakes itself with
// the write. Each wake is one reconcile and no status write; the Ready
// condition keeps the time its bootstrap failed. The reconcile sets Ready
// True (provisioned) before the bootstrap watch sets it False again, but
// Cluster API's patch helper applies an owned condition with
// meta.SetStatusCondition, which keeps the stored transition time while
// the status is unchanged (cluster-api v1.14.2 util/conditions/patch.go,
// Apply): the flip stays in memory. This test keeps it so.
//
// It runs beside other tests: the Run Command answers are its own
// emulator's, and it counts its own manager's reconciles.
func TestBootstrapFailedMachineStaysPut(t *testing.T) {
	parallel(t)
	rt := &arm.RecordingRuntime{Answer: func(string, arm.Command) (arm.CommandResult, error) {
		return arm.CommandResult{Stdout: "[preflight] Running pre-flight checks\nerror execution phase preflight: couldn't validate the identity of the API Server: dial tcp 192.0.2.10:6443: i/o timeout\n"}, nil
	}}
	_, cfg := newEmulator(t, arm.Options{Runtime: rt})
	stop, rc := startCountedControllers(t, cfg, func(o *controllers.Options) { o.BootstrapTimeout = time.Second })
	defer stop()
	f := newCluster(t, "wake")
	f.waitClusterProvisioned(time.Minute)
	am := f.newMachine("wake-md-0", false, false, "1")
	var failedAt metav1.Time
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKeyFromObject(am), am); err != nil {
			return err.Error()
		}
		c := conditions.Get(am, controllers.ReadyCondition)
		if c == nil || c.Reason != controllers.BootstrapFailedReason {
			return fmt.Sprintf("Ready %+v, want BootstrapFailed", c)
		}
		failedAt = c.LastTransitionTime
		return ""
	})

	// The failure stands once the boot log is read; the kubelet log's Run
	// Command may still be under way, polled every runCommandPoll (2 s), and
	// those reconciles are the diagnosis', not wakes. Count from the first
	// quiet window longer than that poll.
	poll.Until(t, time.Minute, func() string {
		before := rc.Finished("azuremachine")
		<-time.After(3 * time.Second)
		if after := rc.Finished("azuremachine"); after != before {
			return fmt.Sprintf("%.0f reconciles in 3s: the diagnosis is still polling", after-before)
		}
		return ""
	})
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(am), am); err != nil {
		t.Fatal(err)
	}

	w, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	events, err := w.Watch(f.ctx, &infrav1.AzureMachineList{}, client.InNamespace(f.ns), client.MatchingFields{"metadata.name": am.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: am.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	var modified atomic.Int64
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		for e := range events.ResultChan() {
			if e.Type == watch.Modified {
				modified.Add(1)
			}
		}
	}()

	const wakes = 5
	reconciles := rc.Finished("azuremachine")
	for i := 0; i < wakes; i++ {
		// A rewritten transition time shows only once the clock has moved
		// to another second (conditions keep whole seconds).
		now := time.Now()
		poll.Until(t, 5*time.Second, func() string {
			if time.Now().Truncate(time.Second).After(now.Truncate(time.Second)) {
				return ""
			}
			return "the clock has not reached the next second"
		})
		before := rc.Finished("azuremachine")
		p := client.MergeFrom(am.DeepCopy())
		if am.Annotations == nil {
			am.Annotations = map[string]string{}
		}
		am.Annotations["test.winkube.dev/wake"] = fmt.Sprint(i)
		if err := env.Client.Patch(f.ctx, am, p); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 30*time.Second, func() string {
			if rc.Finished("azuremachine") > before {
				return ""
			}
			return fmt.Sprintf("wake %d: no reconcile yet", i)
		})
	}
	// A window for the last wake's write, if any, and the reconcile it
	// would cause.
	<-time.After(2 * time.Second)
	reconciled := rc.Finished("azuremachine") - reconciles
	events.Stop()
	<-counted
	writes := int(modified.Load()) - wakes // less the test's own annotations
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(am), am); err != nil {
		t.Fatal(err)
	}
	ready := conditions.Get(am, controllers.ReadyCondition)
	t.Logf("%d wakes of a BootstrapFailed machine: %.0f reconciles, %d status writes by the controller; Ready's transition %s, first %s",
		wakes, reconciled, writes, ready.LastTransitionTime.UTC().Format(time.RFC3339), failedAt.UTC().Format(time.RFC3339))
	if writes != 0 || !ready.LastTransitionTime.Equal(&failedAt) {
		t.Errorf("the failed machine's status was written %d times over %d wakes and Ready's transition time moved from %s to %s: want no write, the condition unchanged",
			writes, wakes, failedAt.UTC().Format(time.RFC3339), ready.LastTransitionTime.UTC().Format(time.RFC3339))
	}
	if reconciled > wakes+1 {
		t.Errorf("%.0f reconciles for %d wakes: the machine wakes itself", reconciled, wakes)
	}
}
