package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// apiRequests counts a manager's requests to the API server, as
// "METHOD path", keeps the query of each request for Secrets, and counts
// the conflicts (409) the API server answered.
type apiRequests struct {
	mu        sync.Mutex
	n         map[string]int
	secrets   []*url.URL
	conflicts int
}

func (a *apiRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		a.mu.Lock()
		a.n[r.Method+" "+r.URL.Path]++
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/secrets") {
			a.secrets = append(a.secrets, r.URL)
		}
		a.mu.Unlock()
		resp, err := rt.RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusConflict {
			a.mu.Lock()
			a.conflicts++
			a.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// patches is how many PATCH requests went to paths with suffix.
func (a *apiRequests) patches(suffix string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for k, v := range a.n {
		if strings.HasPrefix(k, http.MethodPatch+" ") && strings.HasSuffix(k, suffix) {
			n += v
		}
	}
	return n
}

func (a *apiRequests) snapshot() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.n))
	for k, v := range a.n {
		out[k] = v
	}
	return out
}

// TestProvisionedMachineRequests covers what a reconcile of a machine whose
// VM runs costs, in a manager set up as winkube's are (Secrets read live,
// the cache holding only clusters' Secrets): no Secret read from the API
// server (the bootstrap data is read once, to create the VM; the
// identity's Secret is kept by a watch of that Secret alone), no patch
// (nothing changed), and one ARM read each of the VM and its NIC. The
// manager watches no Secret beyond the clusters' and the identity's own.
func TestProvisionedMachineRequests(t *testing.T) {
	w := newEntraWorld(t)
	const sub = "00000000-0000-0000-0000-0000000000f1"
	sp, secret := w.principal(t, "perf", sub)
	f := newCluster(t, "perf", withIdentity(sub, "perf", ""))
	createIdentity(t, f.ns, "perf", sp, secret, &infrav1.AllowedNamespaces{NamespaceList: []string{f.ns}})

	reqs := &apiRequests{n: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = reqs.wrap
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Client: controllers.ReadSecretsLive(client.Options{}), Cache: controllers.SecretCache(cache.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.Setup(mgr, controllers.Options{Cloud: cloud.New(w.cfg), Concurrency: 4, Requeue: 50 * time.Millisecond, SkipNameValidation: true}); err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)

	f.waitClusterProvisioned(2 * time.Minute)
	am := f.newMachine("perf-win", false, true, "1")
	f.waitMachinesProvisioned(2*time.Minute, am.Name)
	bootstrap := "GET /api/v1/namespaces/" + f.ns + "/secrets/" + am.Name + "-bootstrap"
	if n := reqs.snapshot()[bootstrap]; n != 1 {
		t.Errorf("the bootstrap data was read %d times to make one VM, want once", n)
	}

	// reconcile wakes the machine and waits for a reconcile to finish.
	reconcile := func() {
		t.Helper()
		before := testenv.Reconciles(t, "azuremachine")
		cur := &infrav1.AzureMachine{}
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(am), cur); err != nil {
			t.Fatal(err)
		}
		p := client.MergeFrom(cur.DeepCopy())
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations["test.winkube.dev/poke"] = time.Now().Format(time.RFC3339Nano)
		if err := env.Client.Patch(f.ctx, cur, p); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, time.Minute, func() string {
			if testenv.Reconciles(t, "azuremachine") <= before {
				return "waiting for the AzureMachine's reconcile"
			}
			return ""
		})
	}
	// What the last provisioning reconciles left to write is written.
	reconcile()
	reconcile()
	api0, arm0, r0 := reqs.snapshot(), w.emu.Counters(), testenv.Reconciles(t, "azuremachine")
	for range 3 {
		reconcile()
	}
	api1, arm1, r1 := reqs.snapshot(), w.emu.Counters(), testenv.Reconciles(t, "azuremachine")
	n := int64(r1 - r0)
	for k, v := range api1 {
		secretRead := strings.HasPrefix(k, "GET ") && strings.Contains(k, "/secrets/")
		// The azure.json Secret's reconcile wakes with the machine too.
		secretWrite := strings.HasPrefix(k, "PUT ") && strings.Contains(k, "/secrets/")
		if d := v - api0[k]; d > 0 && (secretRead || secretWrite || strings.HasPrefix(k, "PATCH ") && strings.Contains(k, "/azuremachines/")) {
			t.Errorf("%d reconciles of a provisioned machine sent %s %d times, want none", n, k, d)
		}
	}
	// One reconcile may straddle a snapshot: its read counted, its end
	// not.
	for _, kind := range []string{"GET virtualMachines", "GET networkInterfaces"} {
		if d := arm1[kind] - arm0[kind]; d > n+1 {
			t.Errorf("%d reconciles of a provisioned machine sent %s %d times, want once each", n, kind, d)
		}
	}

	// The manager lists and watches only clusters' Secrets (labelled),
	// and the identity's Secret by its name in its namespace.
	reqs.mu.Lock()
	defer reqs.mu.Unlock()
	for _, u := range reqs.secrets {
		q := u.Query()
		switch {
		case q.Get("fieldSelector") == "metadata.name=perf-secret" && u.Path == "/api/v1/namespaces/"+f.ns+"/secrets":
		case strings.Contains(q.Get("labelSelector"), "cluster.x-k8s.io/cluster-name") && q.Get("fieldSelector") == "":
		default:
			t.Errorf("the manager read Secrets beyond its clusters' and its identity's: %s", fmt.Sprint(u))
		}
	}
}

// TestNewMachineWritesEachChangeOnce follows a new machine's reconciles,
// called one after the other on what the API server holds, and counts
// their writes through the API server: the Paused condition is written by
// one patch (not also sent again from the object as read, refused as a
// conflict, and retried as an empty patch), no patch of the machine is
// refused as a conflict, and a reconcile that recorded something (its
// finalizer, the resources it is about to make) does not ask to come back
// at once, before its write reached the manager's cache: the write's own
// event brings it back.
func TestNewMachineWritesEachChangeOnce(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	f := newCluster(t, "once")
	f.waitClusterProvisioned(2 * time.Minute)
	stop()
	am := f.newMachine("once-md-0", false, false, "1")

	reqs := &apiRequests{n: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = reqs.wrap
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	r := machineReconciler(armCfg, nil)
	r.Client, r.Identities.Client, r.Identities.Reader = c, c, c
	key := client.ObjectKeyFromObject(am)
	reconcile := func() ctrl.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return res
	}

	reconcile()
	if n := reqs.patches("/azuremachines/" + am.Name + "/status"); n != 1 || reqs.conflicts != 0 {
		t.Errorf("the first reconcile wrote the Paused condition with %d status patches (%d refused as conflicts), want one", n, reqs.conflicts)
	}
	for i := 0; ; i++ {
		res := reconcile()
		if res.RequeueAfter > 0 && res.RequeueAfter < 10*time.Millisecond {
			t.Errorf("reconcile %d asked to come back after %s, before its own write is in the cache: its write's event brings it back", i+2, res.RequeueAfter)
		}
		cur := &infrav1.AzureMachine{}
		if err := env.Client.Get(f.ctx, key, cur); err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(cur.Status.Initialization.Provisioned, false) {
			break
		}
		if i == 30 {
			t.Fatalf("not provisioned after %d reconciles: %+v", i+2, cur.Status.Conditions)
		}
	}
	if reqs.conflicts != 0 {
		t.Errorf("the API server refused %d of the machine's patches as conflicts: a reconcile wrote from a stale object", reqs.conflicts)
	}
}

// TestVMCreationReads follows a new machine's reconciles, called one after
// the other, against an emulator whose Windows VMs take 5 s to boot (so
// that their creation spans reconciles even when the tests running beside
// it slow each reconcile and read to a second or more), and counts each reconcile's
// ARM reads: a VM found missing is read once before its PUT, not again by
// the PUT's reconcile; while the PUT is under way, its operation is polled
// and the VM not read; and the reconcile that sees the operation finish
// takes the VM from the operation's final response (the one GET the SDK's
// poller makes), not from one more read. The emulator whose reads it counts
// is its own, so it runs beside other tests.
func TestVMCreationReads(t *testing.T) {
	parallel(t)
	emu, cfg := newEmulator(t, arm.Options{BootDelayWindows: 5 * time.Second})
	stop := startControllers(t, cfg)
	f := newCluster(t, "vmreads")
	f.waitClusterProvisioned(2 * time.Minute)
	stop()
	am := f.newMachine("vmreads-win", false, true, "1")

	r := machineReconciler(cfg, nil)
	key := client.ObjectKeyFromObject(am)
	const getVM, putVM = "GET virtualMachines", "PUT virtualMachines"
	polls, sawUnderway, start := 0, false, time.Now()
	for i := 0; ; i++ {
		before := &infrav1.AzureMachine{}
		if err := env.Client.Get(f.ctx, key, before); err != nil {
			t.Fatal(err)
		}
		underway := false
		for _, op := range before.Status.LongRunningOperationStates {
			underway = underway || op.ServiceName == "virtualmachines" && op.Type == "PUT"
		}
		c0 := emu.Counters()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		cancel()
		if err != nil {
			t.Fatalf("reconcile %d: %v", i+1, err)
		}
		c1 := emu.Counters()
		after := &infrav1.AzureMachine{}
		if err := env.Client.Get(f.ctx, key, after); err != nil {
			t.Fatal(err)
		}
		reads := c1[getVM] - c0[getVM]
		provisioned := ptr.Deref(after.Status.Initialization.Provisioned, false)
		switch {
		case c1[putVM] > c0[putVM] && reads > 1:
			t.Errorf("reconcile %d read the VM %d times and then sent it: a VM found missing is read once", i+1, reads)
		case underway && !provisioned:
			sawUnderway = true
			polls++
			if reads != 0 {
				t.Errorf("reconcile %d read the VM %d times while its PUT was under way, want none (the operation is polled)", i+1, reads)
			}
		case underway && provisioned && reads > 1:
			t.Errorf("reconcile %d saw the VM's creation finish and read the VM %d times: the operation's final response carries it, want one read (the SDK poller's)", i+1, reads)
		}
		if provisioned {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("not provisioned after %d reconciles: %+v", i+1, after.Status.Conditions)
		}
	}
	if !sawUnderway {
		t.Fatalf("no reconcile saw the VM's creation under way (%d polls): the test saw nothing", polls)
	}
}

// pollingEmulator starts an emulator of its own, with o, and the
// controllers on it, at a requeue interval (500 ms) well under the
// operations the tests make slow.
func pollingEmulator(t *testing.T, o arm.Options) *arm.Server {
	t.Helper()
	emu, cfg := newEmulator(t, o)
	stop := startControllersWith(t, cfg, func(o *controllers.Options) { o.Requeue = 500 * time.Millisecond })
	t.Cleanup(stop)
	return emu
}

// TestVMCreationIsPolledWhenAzureAsks runs the manager, at a requeue
// interval well under the time a Windows VM takes to make (5 s here), and
// counts the operation polls of one machine's creation: its NIC's
// operation, done at once, and its VM's, whose every answer says, in
// Retry-After, how long it has left. The VM's operation is not polled
// in the reconcile that started it (the SDK's own PollUntilDone would
// wait the first answer's Retry-After), nor at the controller's interval
// while it runs, but when Azure asked: once, give or take a late timer.
func TestVMCreationIsPolledWhenAzureAsks(t *testing.T) {
	parallel(t)
	emu := pollingEmulator(t, arm.Options{BootDelayWindows: 5 * time.Second})
	f := newCluster(t, "vmpolls")
	f.waitClusterProvisioned(2 * time.Minute)
	const getOp = "GET operations"
	c0 := emu.Counters()
	am := f.newMachine("vmpolls-win", false, true, "1")
	f.waitMachinesProvisioned(2*time.Minute, am.Name)
	c1 := emu.Counters()
	if c1["PUT virtualMachines"] == c0["PUT virtualMachines"] {
		t.Fatal("the machine was provisioned without a VM PUT: the test saw no operation")
	}
	// Two polls for the NIC (one at once, one more if its operation had
	// not finished yet), two for the VM (the second only if the
	// emulator's timer ran late on a loaded machine).
	if polls := c1[getOp] - c0[getOp]; polls > 4 {
		t.Errorf("making one Windows VM (5 s) and its NIC polled their operations %d times, want at most 4: the VM's operation asked, in Retry-After, to be polled when it is due, not at the controller's 500 ms requeue", polls)
	}
}

// TestClusterOperationIsPolledWhenAzureAsks is the same for an
// AzureCluster: its load balancer's PUT, made to take 4 s, is polled when
// its Retry-After says, not at the controller's 500 ms requeue.
func TestClusterOperationIsPolledWhenAzureAsks(t *testing.T) {
	parallel(t)
	emu := pollingEmulator(t, arm.Options{Faults: []arm.Fault{{Method: http.MethodPut, Kind: "loadBalancers", OperationDelay: 4 * time.Second}}})
	f := newCluster(t, "clusterpolls")
	f.waitClusterProvisioned(2 * time.Minute)
	c := emu.Counters()
	if c["PUT loadBalancers"] == 0 {
		t.Fatal("the cluster was provisioned without a load balancer PUT: the test saw no slow operation")
	}
	// Each of the cluster's other operations ends at once: one poll each
	// (one more for each whose timer had not run yet on a loaded
	// machine); the load balancer's, one. At the 500 ms requeue the load
	// balancer's alone would take eight.
	var puts int64
	for k, v := range c {
		if strings.HasPrefix(k, "PUT ") {
			puts += v
		}
	}
	if polls := c["GET operations"]; polls > puts+4 {
		t.Errorf("making the cluster's %d resources (its load balancer's taking 4 s) polled their operations %d times, want at most %d: the load balancer's operation asked, in Retry-After, to be polled when it is due, not at the controller's 500 ms requeue", puts, polls, puts+4)
	}
}

// TestStatusUpdatesDoNotWakeAMachine runs the manager with one worker per
// controller, so that the AzureMachines' queue is served in order: a
// machine whose status alone is updated (as its own reports update it) is
// not reconciled for that, while the update of another machine queued
// after it is; so its reconcile, had it been woken, would have run first
// and written its addresses back. Each such wake read its VM and NIC in
// Azure again. A paused annotation, its removal and the machine's deletion
// still wake it. Its manager sees only its namespace, so it runs beside
// other tests.
func TestStatusUpdatesDoNotWakeAMachine(t *testing.T) {
	parallel(t)
	stop := startControllersWith(t, armCfg, func(o *controllers.Options) { o.Concurrency = 1 })
	t.Cleanup(stop)
	f := newCluster(t, "statuswake")
	f.waitClusterProvisioned(2 * time.Minute)
	a, b := f.newMachine("statuswake-a", false, false, "1"), f.newMachine("statuswake-b", false, false, "1")
	f.waitMachinesProvisioned(2*time.Minute, a.Name, b.Name)
	get := func(am *infrav1.AzureMachine) *infrav1.AzureMachine {
		t.Helper()
		cur := &infrav1.AzureMachine{}
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(am), cur); err != nil {
			t.Fatal(err)
		}
		return cur
	}
	// Once the machines' own last writes have been seen: a reconcile they
	// woke ran before the update below, or not at all.
	poll.Until(t, time.Minute, func() string {
		for _, am := range []*infrav1.AzureMachine{a, b} {
			if cur := get(am); cur.Spec.ProviderID == "" || len(cur.Status.Addresses) == 0 {
				return am.Name + " has no providerID or addresses yet"
			}
		}
		return ""
	})

	cur := get(a)
	p := client.MergeFrom(cur.DeepCopy())
	cur.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "192.0.2.1"}}
	if err := env.Client.Status().Patch(f.ctx, cur, p); err != nil {
		t.Fatal(err)
	}
	// b's finalizer, taken off, is put back by b's reconcile, which the
	// one worker runs after any reconcile of a queued before it.
	curB := get(b)
	pb := client.MergeFrom(curB.DeepCopy())
	curB.Finalizers = nil
	if err := env.Client.Patch(f.ctx, curB, pb); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if len(get(b).Finalizers) == 0 {
			return "waiting for b's reconcile to put its finalizer back"
		}
		return ""
	})
	if got := get(a).Status.Addresses; len(got) != 1 || got[0].Address != "192.0.2.1" {
		t.Errorf("an update of machine a's status alone woke it (its reconcile wrote its addresses back: %v): it reads its VM and NIC in Azure each time", got)
	}

	pausedIs := func(want metav1.ConditionStatus) func() string {
		return func() string {
			if c := conditions.Get(get(a), clusterv1.PausedCondition); c == nil || c.Status != want {
				return fmt.Sprintf("waiting for a's Paused condition to be %s: %v", want, c)
			}
			return ""
		}
	}
	setPausedAnnotation := func(paused bool) {
		t.Helper()
		cur := get(a)
		p := client.MergeFrom(cur.DeepCopy())
		if paused {
			cur.Annotations[clusterv1.PausedAnnotation] = ""
		} else {
			delete(cur.Annotations, clusterv1.PausedAnnotation)
		}
		if err := env.Client.Patch(f.ctx, cur, p); err != nil {
			t.Fatal(err)
		}
	}
	setPausedAnnotation(true)
	poll.Until(t, time.Minute, pausedIs(metav1.ConditionTrue))
	setPausedAnnotation(false)
	poll.Until(t, time.Minute, pausedIs(metav1.ConditionFalse))
	// Unpaused, it goes on: its addresses are written back.
	poll.Until(t, time.Minute, func() string {
		if got := get(a).Status.Addresses; len(got) != 2 {
			return fmt.Sprintf("waiting for the unpaused machine's reconcile to write its addresses: %v", got)
		}
		return ""
	})
	f.deleteAndWait(2*time.Minute, get(a))
}

// TestScaleSetOperationIsPolledWhenAzureAsks is the same for an
// AzureMachinePool: its Windows scale set's PUT, whose one instance takes
// 4 s to boot, is polled when its Retry-After says, not at the
// controller's 500 ms requeue.
func TestScaleSetOperationIsPolledWhenAzureAsks(t *testing.T) {
	parallel(t)
	emu := pollingEmulator(t, arm.Options{BootDelayWindows: 4 * time.Second})
	f := newCluster(t, "vmsspolls")
	f.waitClusterProvisioned(2 * time.Minute)
	c0 := emu.Counters()
	f.readyPool("vmsspolls-win", 1, true)
	c1 := emu.Counters()
	writes := c1["PUT virtualMachineScaleSets"] + c1["PATCH virtualMachineScaleSets"] - c0["PUT virtualMachineScaleSets"] - c0["PATCH virtualMachineScaleSets"]
	if writes == 0 {
		t.Fatal("the pool was made without a scale-set write: the test saw no slow operation")
	}
	// One poll for each write, and for the slow one a second only if the
	// emulator's timer ran late on a loaded machine. At the 500 ms requeue
	// the slow one alone would take eight.
	polls := c1["GET operations"] - c0["GET operations"]
	t.Logf("%d scale-set writes, %d operation polls", writes, polls)
	if polls > writes+2 {
		t.Errorf("making a pool's scale set (%d writes, one instance booting 4 s) polled their operations %d times, want at most %d: the scale set's operation asked, in Retry-After, to be polled when it is due, not at the controller's 500 ms requeue", writes, polls, writes+2)
	}
}

// TestStatusUpdatesDoNotWakeAPoolOrACluster is TestStatusUpdatesDoNotWakeAMachine
// for AzureMachinePools and AzureClusters: with one worker per
// controller, a pool's and a cluster's status updated alone (as their own
// reports update them) do not wake them, while the finalizers taken off
// another pool and cluster, updated after them, do; so their reconciles,
// had they been woken, would have run first and written their status
// back. Each such wake read the scale set and listed its instances, or
// read every network resource of the cluster, in Azure again. It runs
// beside other tests: its manager sees only its namespaces, and it counts
// that manager's reconciles.
func TestStatusUpdatesDoNotWakeAPoolOrACluster(t *testing.T) {
	parallel(t)
	stop, rc := startCountedControllers(t, armCfg, func(o *controllers.Options) { o.Concurrency = 1 })
	t.Cleanup(stop)
	fa, fb := newCluster(t, "ownwrite-a"), newCluster(t, "ownwrite-b")
	fa.waitClusterProvisioned(2 * time.Minute)
	fb.waitClusterProvisioned(2 * time.Minute)
	_, pa := fa.readyPool("ownwrite-pa", 1, true)
	_, pb := fa.readyPool("ownwrite-pb", 1, true)
	// Once nothing is reconciled any more: a reconcile queued before the
	// updates below (a requeue) would run first and write back what they
	// change.
	for _, c := range []string{"azurecluster", "azuremachinepool"} {
		last, since := rc.Finished(c), time.Now()
		poll.Until(t, time.Minute, func() string {
			if n := rc.Finished(c); n != last {
				last, since = n, time.Now()
			}
			if time.Since(since) < 2*time.Second {
				return "waiting for the " + c + " controller to settle"
			}
			return ""
		})
	}

	const prefix = "written-by-the-test"
	domains := []clusterv1.FailureDomain{{Name: "9", ControlPlane: ptr.To(true)}}
	writeStatus := func(o client.Object, change func()) {
		t.Helper()
		if err := env.Client.Get(fa.ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		p := client.MergeFrom(o.DeepCopyObject().(client.Object))
		change()
		if err := env.Client.Status().Patch(fa.ctx, o, p); err != nil {
			t.Fatal(err)
		}
	}
	writeStatus(pa, func() { pa.Status.ComputerNamePrefix = prefix })
	writeStatus(fa.ac, func() { fa.ac.Status.FailureDomains = domains })
	// The others' finalizers, taken off, are put back by their
	// reconciles, which the one worker of each controller runs after any
	// of pa's or fa's queued before them.
	dropFinalizers := func(o client.Object) {
		t.Helper()
		if err := env.Client.Get(fa.ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		p := client.MergeFrom(o.DeepCopyObject().(client.Object))
		o.SetFinalizers(nil)
		if err := env.Client.Patch(fa.ctx, o, p); err != nil {
			t.Fatal(err)
		}
	}
	dropFinalizers(pb)
	dropFinalizers(fb.ac)
	env.Until(t, time.Minute, func(r client.Reader) string {
		for _, o := range []client.Object{pb, fb.ac} {
			if err := r.Get(fa.ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return err.Error()
			}
			if len(o.GetFinalizers()) == 0 {
				return "waiting for " + o.GetName() + "'s reconcile to put its finalizer back"
			}
		}
		return ""
	})
	for _, o := range []client.Object{pa, fa.ac} {
		if err := env.Client.Get(fa.ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
	}
	if pa.Status.ComputerNamePrefix != prefix {
		t.Errorf("an update of pool %s's status alone woke it (its reconcile wrote its computer-name prefix back: %q): it reads its scale set and lists its instances each time", pa.Name, pa.Status.ComputerNamePrefix)
	}
	var got []string
	for _, d := range fa.ac.Status.FailureDomains {
		got = append(got, d.Name)
	}
	if len(got) != 1 || got[0] != "9" {
		t.Errorf("an update of AzureCluster %s's status alone woke it (its reconcile wrote its failure domains back: %v): it reads every network resource each time", fa.ac.Name, got)
	}
}
