package controllers_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
)

// A failed bootstrap's log is read by a Run Command that no reconcile
// waits for: while the VM agent still runs it, the machine records the
// command's resume token and other machines reconcile; a second machine
// waits for the manager's only Run Command slot; a restarted manager
// resumes the recorded command rather than starting another (which Azure
// would refuse while the first runs); once it completes, the log and the
// condition appear as before.
func TestBootstrapLogRunCommandDoesNotHoldTheReconcile(t *testing.T) {
	parallel(t)
	const slowLog = "[preflight] Running pre-flight checks\n" +
		"error execution phase preflight: couldn't validate the identity of the API Server: dial tcp 192.0.2.10:6443: i/o timeout\n"
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	var mu sync.Mutex
	calls := map[string]int{}
	runtime := &arm.RecordingRuntime{}
	runtime.Answer = func(id string, c arm.Command) (arm.CommandResult, error) {
		name := id[strings.LastIndex(id, "/")+1:]
		mu.Lock()
		calls[name]++
		mu.Unlock()
		if name == "rcasync-md-slow" {
			<-release
			return arm.CommandResult{Stdout: slowLog}, nil
		}
		return arm.CommandResult{Stdout: "error execution phase kubelet-start: timed out\n"}, nil
	}
	called := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[name]
	}
	_, armCfg := newEmulator(t, arm.Options{Runtime: runtime})
	limitOne := func(o *controllers.Options) {
		o.BootstrapTimeout = 3 * time.Second
		o.RunCommandConcurrency = 1
	}
	stop := startControllersWith(t, armCfg, limitOne)
	defer func() { stop() }()
	f := newCluster(t, "rcasync")
	f.waitClusterProvisioned(time.Minute)
	f.newMachine("rcasync-md-slow", false, false, "1")
	f.waitMachinesProvisioned(time.Minute, "rcasync-md-slow")

	get := func(name string) *infrav1.AzureMachine {
		am := &infrav1.AzureMachine{}
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, am); err != nil {
			t.Fatal(err)
		}
		return am
	}
	runCommandToken := func(am *infrav1.AzureMachine) string {
		for _, x := range am.Status.LongRunningOperationStates {
			if x.ServiceName == "runcommand" && x.Data != "" {
				return x.Data
			}
		}
		return ""
	}
	// The command runs (the agent holds it) and the reconcile that started
	// it has returned: its resume token is in the machine's status.
	poll.Until(t, time.Minute, func() string {
		if called("rcasync-md-slow") == 0 {
			return "the slow machine's Run Command has not reached its VM agent"
		}
		if am := get("rcasync-md-slow"); runCommandToken(am) == "" {
			return fmt.Sprintf("no Run Command recorded in the slow machine's status while it runs: %+v", am.Status.LongRunningOperationStates)
		}
		return ""
	})

	// Another machine reconciles meanwhile, and once its own deadline
	// passes, waits for the one slot rather than starting a second command.
	f.newMachine("rcasync-md-next", false, false, "2")
	f.waitMachinesProvisioned(time.Minute, "rcasync-md-next")
	poll.Until(t, time.Minute, func() string {
		c := conditions.Get(get("rcasync-md-next"), controllers.BootstrapSucceededCondition)
		if c == nil || !strings.Contains(c.Message, "once one of the manager's Run Commands under way finishes") {
			return fmt.Sprintf("the second machine's BootstrapSucceeded while the slot is taken: %+v", c)
		}
		return ""
	})
	if n := called("rcasync-md-next"); n != 0 {
		t.Errorf("the second machine's Run Command ran %d times while the only slot was taken", n)
	}

	// A restart resumes the recorded command: a new one would be refused
	// while the first runs (409), or run the script a second time.
	stop()
	stop = startControllersWith(t, armCfg, limitOne)
	if runCommandToken(get("rcasync-md-slow")) == "" {
		t.Fatal("the restart lost the slow machine's Run Command")
	}
	open()
	for _, name := range []string{"rcasync-md-slow", "rcasync-md-next"} {
		poll.Until(t, time.Minute, func() string {
			am := get(name)
			c := conditions.Get(am, controllers.BootstrapSucceededCondition)
			if c == nil || c.Reason != controllers.BootstrapFailedReason {
				return fmt.Sprintf("%s's BootstrapSucceeded: %+v", name, c)
			}
			if !strings.Contains(c.Message, "read through Run Command") {
				return fmt.Sprintf("%s's log was not read through Run Command:\n%s", name, c.Message)
			}
			if tok := runCommandToken(am); tok != "" {
				return fmt.Sprintf("%s keeps a finished Run Command's token", name)
			}
			return ""
		})
	}
	slow := get("rcasync-md-slow")
	if c := conditions.Get(slow, controllers.BootstrapSucceededCondition); !strings.Contains(c.Message, "i/o timeout") {
		t.Errorf("the slow machine's condition does not carry its log's cause:\n%s", c.Message)
	}
	if r := conditions.Get(slow, controllers.ReadyCondition); r == nil || r.Status != metav1.ConditionFalse || r.Reason != controllers.BootstrapFailedReason {
		t.Errorf("the slow machine's Ready: %+v, want False/BootstrapFailed", r)
	}
	if n := called("rcasync-md-slow"); n != 1 {
		t.Errorf("the slow machine's script ran %d times, want once (the restart resumes the recorded command)", n)
	}
}
