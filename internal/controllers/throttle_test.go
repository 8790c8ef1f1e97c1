package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
)

// throttledWorld is an emulator whose subscription may make one write a
// minute once a burst of writes (enough for a cluster) is spent, as ARM's
// token bucket does: its 429s carry the real wait until the next token,
// up to a minute, which the SDK's default retry policy sleeps through.
// ctrlCfg is the endpoint as the manager has it (no retry settings of its
// own: the SDK's defaults); testCfg makes one try, for the test's own
// calls.
func throttledWorld(t *testing.T) (emu *arm.Server, ctrlCfg, testCfg endpoint.Config) {
	t.Helper()
	s, err := arm.New(arm.Options{Token: token, PollInterval: 10 * time.Millisecond, Runtime: &arm.RecordingRuntime{},
		Throttle: arm.Throttle{WritesPerHour: 60, Burst: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctrlCfg = endpoint.Config{ResourceManagerEndpoint: s.URL(), CACertPEM: s.CACertPEM(), Credential: endpoint.StaticToken(token)}
	testCfg = ctrlCfg
	testCfg.Retry = &policy.RetryOptions{MaxRetries: -1}
	return s, ctrlCfg, testCfg
}

// spendWrites writes (a group of the test's own, again and again) until
// Azure throttles the subscription's writes, and returns the wait Azure
// asked for.
func spendWrites(t *testing.T, cfg endpoint.Config, rg string) time.Duration {
	t.Helper()
	groups, err := endpoint.NewClient(cfg, subscription, armresources.NewResourceGroupsClient)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		_, err := groups.CreateOrUpdate(context.Background(), rg, armresources.ResourceGroup{Location: to.Ptr("westeurope"),
			Tags: map[string]*string{"spent": to.Ptr(fmt.Sprint(i))}}, nil)
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusTooManyRequests {
			wait, perr := time.ParseDuration(re.RawResponse.Header.Get("x-ms-retry-after-ms") + "ms")
			if perr != nil {
				t.Fatalf("a 429 without ARM's x-ms-retry-after-ms: %v", re.RawResponse.Header)
			}
			return wait
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("200 writes and Azure never throttled")
	return 0
}

// machineReconciler is the AzureMachine reconciler alone, called by the
// test rather than by a manager's workers, so that what one reconcile
// returns can be seen.
func machineReconciler(cfg endpoint.Config, change func(*cloud.Cloud)) *controllers.AzureMachineReconciler {
	c := cloud.New(cfg)
	if change != nil {
		change(c)
	}
	return &controllers.AzureMachineReconciler{Client: env.Client, Cloud: c, Requeue: 50 * time.Millisecond, BootstrapTimeout: time.Hour,
		Identities: &controllers.Identities{Client: env.Client, Reader: env.Client, Cloud: c, ManagerCredentialNamespaces: []string{controllers.AllNamespaces}}}
}

// reconcileUntilAzure calls Reconcile until it stops for something other
// than writing what it just recorded (a finalizer, the resources it is about
// to make), after which the write's own event would bring it back. The guard is only there so that a
// reconcile that sleeps fails the test instead of hanging it.
func reconcileUntilAzure(t *testing.T, r *controllers.AzureMachineReconciler, am *infrav1.AzureMachine, guard time.Duration) (ctrl.Result, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	start := time.Now()
	for i := 0; ; i++ {
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(am)})
		if err != nil || res.RequeueAfter > 10*time.Millisecond || i == 10 {
			return res, time.Since(start), err
		}
	}
}

// TestThrottledReconcileRequeuesAfterRetryAfter: once the subscription's
// writes are spent, a machine's reconcile asks Azure once, and returns at
// once with a requeue after the wait Azure gave, instead of sleeping
// through the SDK's retries in the worker.
func TestThrottledReconcileRequeuesAfterRetryAfter(t *testing.T) {
	emu, ctrlCfg, testCfg := throttledWorld(t)
	stop := startControllers(t, ctrlCfg)
	f := newCluster(t, "thrq")
	f.waitClusterProvisioned(2 * time.Minute)
	stop()
	am := f.newMachine("thrq-md-0", false, false, "1")
	wait := spendWrites(t, testCfg, f.ns+"-spent")
	t.Logf("the subscription's writes are spent: Azure asks to wait %s", wait)

	before := emu.Counters()["THROTTLED writes"]
	res, took, err := reconcileUntilAzure(t, machineReconciler(ctrlCfg, nil), am, 20*time.Second)
	throttledCalls := emu.Counters()["THROTTLED writes"] - before
	t.Logf("the reconcile returned after %s with %+v, %v; Azure throttled %d of its writes", took.Round(time.Millisecond), res, err, throttledCalls)
	if err != nil || res.RequeueAfter < time.Second || res.RequeueAfter > time.Minute {
		t.Fatalf("the throttled reconcile returned %+v, error %v: want no error and a requeue after Azure's Retry-After (up to the bucket's minute a token), not a worker sleeping through the SDK's retries", res, err)
	}
	if throttledCalls != 1 {
		t.Errorf("Azure throttled %d writes of one reconcile: want exactly one try, no retry inside the reconcile", throttledCalls)
	}
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(am), am); err != nil {
		t.Fatal(err)
	}
	if c := conditions.Get(am, controllers.ReadyCondition); c == nil || !strings.Contains(c.Message, "HTTP 429 SubscriptionRequestsThrottled") || !strings.Contains(c.Message, "retries after the wait Azure asked for") {
		t.Errorf("Ready condition %+v: want it to say Azure throttled the request and when winkube retries", c)
	}
}

// TestAzureCallsTimeOut: a request Azure never answers is abandoned after
// the call timeout, and the reconcile returns with the error instead of
// holding its worker.
func TestAzureCallsTimeOut(t *testing.T) {
	parallel(t)
	emu, cfg := newEmulator(t, arm.Options{})
	cfg.Retry = nil
	stop := startControllers(t, cfg)
	f := newCluster(t, "hang")
	f.waitClusterProvisioned(2 * time.Minute)
	stop()
	am := f.newMachine("hang-md-0", false, false, "1")
	emu.SetFaults(arm.FaultConfig{Faults: []arm.Fault{{Method: "GET", Kind: "virtualMachines", Delay: time.Minute}}})
	defer emu.SetFaults(arm.FaultConfig{})
	r := machineReconciler(cfg, func(c *cloud.Cloud) { c.CallTimeout = time.Second })
	res, took, err := reconcileUntilAzure(t, r, am, 30*time.Second)
	t.Logf("with Azure not answering, the reconcile returned after %s: %+v, %v", took.Round(time.Millisecond), res, err)
	if !errors.Is(err, context.DeadlineExceeded) || took >= 30*time.Second {
		t.Fatalf("the reconcile returned %v after %s: want the call abandoned after its timeout (1 s), well before the test's 30 s guard", err, took.Round(time.Second))
	}
}

// sampleWorkers samples how many of a controller's workers are in a
// reconcile, every 10 ms, until the returned function is called; it
// returns their mean and most, and the seconds spent in the reconciles
// that returned meanwhile (a reconcile still sleeping is in the samples
// only).
func sampleWorkers(rc *reconcileCounter, controller string) func() (mean, most, seconds float64) {
	seconds0 := rc.Worked(controller)
	done, finished := make(chan struct{}), make(chan struct{})
	var n, sum, most float64
	go func() {
		defer close(finished)
		for tick := time.NewTicker(10 * time.Millisecond); ; {
			select {
			case <-done:
				tick.Stop()
				return
			case <-tick.C:
				w := rc.Active(controller)
				n, sum, most = n+1, sum+w, max(most, w)
			}
		}
	}()
	return func() (float64, float64, float64) {
		close(done)
		<-finished
		return sum / max(n, 1), most, rc.Worked(controller) - seconds0
	}
}

// TestThrottlingHoldsNoWorkers: 20 machines reconciled by 4 workers while
// the subscription's writes are spent. Every machine is looked at and
// told to come back when Azure said (its Ready condition says so), and the
// workers are free meanwhile. The test measures how busy the workers were,
// and how often the machines were reconciled, on a manager of its own,
// beside other tests.
func TestThrottlingHoldsNoWorkers(t *testing.T) {
	parallel(t)
	_, ctrlCfg, testCfg := throttledWorld(t)
	stop, rc := startCountedControllers(t, ctrlCfg, nil)
	defer stop()
	f := newCluster(t, "thrw")
	f.waitClusterProvisioned(2 * time.Minute)
	spendWrites(t, testCfg, f.ns+"-spent")

	const n = 20
	reconciles := rc.Finished("azuremachine")
	var names []string
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("thrw-md-%02d", i))
		f.newMachine(names[i], false, i%2 == 1, fmt.Sprint(1+i%3))
	}
	// The workers' occupation is sampled from here to the test's end.
	start := time.Now()
	stopSampling := sampleWorkers(rc, "azuremachine")
	defer func() {
		mean, most, worked := stopSampling()
		t.Logf("%d machines, 4 workers, over %s: workers busy %.2f of 4 on average (at most %.0f); %.1f worker-seconds in reconciles that returned; %.0f reconciles",
			n, time.Since(start).Round(time.Millisecond), mean, most, worked, rc.Finished("azuremachine")-reconciles)
	}()
	env.Until(t, time.Minute, func(r client.Reader) string {
		for _, name := range names {
			am := &infrav1.AzureMachine{}
			if err := r.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, am); err != nil {
				return err.Error()
			}
			if c := conditions.Get(am, controllers.ReadyCondition); c == nil || !strings.Contains(c.Message, "SubscriptionRequestsThrottled") {
				return fmt.Sprintf("machine %s was not told Azure throttled it: %+v", name, c)
			}
		}
		return ""
	})
	all := time.Since(start)
	first := rc.Finished("azuremachine") - reconciles
	// Then the machines wait: a requeue at Azure's Retry-After, not a
	// status write that wakes them at once (a message counting down the
	// seconds would).
	window := rc.Finished("azuremachine")
	<-time.After(3 * time.Second)
	idle := rc.Finished("azuremachine") - window
	t.Logf("all told to come back after %s in %.0f reconciles; then %.0f reconciles in 3 s", all.Round(time.Millisecond), first, idle)
	if idle > 2*n {
		t.Errorf("%.0f reconciles of %d throttled machines in 3 s: they wake themselves instead of waiting for Azure's Retry-After", idle, n)
	}
}
