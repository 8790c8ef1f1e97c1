package controllers_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/poll"
)

func totalCalls(s *arm.Server) int64 {
	var n int64
	for k, v := range s.Counters() {
		if !strings.HasPrefix(k, "THROTTLED") {
			n += v
		}
	}
	return n
}

// machineSet makes n machines: one control plane, then Linux and Windows
// workers in turn.
func (f *fixture) machineSet(prefix string, n int) []string {
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%02d-%05d", prefix, i, i*7919%100000)
		f.newMachine(name, i == 0, i%2 == 1, fmt.Sprint(1+i%3))
		names = append(names, name)
	}
	return names
}

// checkOneOfEach asserts exactly one VM, NIC and OS disk per machine.
func checkOneOfEach(t *testing.T, az *azure, rg string, n int) {
	t.Helper()
	inv := az.inventory(rg)
	for _, typ := range []string{"virtualMachines", "networkInterfaces", "disks"} {
		if len(inv[typ]) != n {
			t.Fatalf("%d %s for %d machines: %v", len(inv[typ]), typ, n, inv[typ])
		}
	}
	for _, vm := range inv["virtualMachines"] {
		found := false
		for _, nic := range inv["networkInterfaces"] {
			found = found || nic == vm+"-nic"
		}
		if !found {
			t.Fatalf("VM %s has no NIC of its own", vm)
		}
	}
}

// TestCrashSafety stops the manager at a random point (after a random number
// of ARM calls) while it creates 20 machines, starts a new one, and checks
// that every machine ends with exactly one VM, NIC and disk, and that
// deleting them leaves nothing.
func TestCrashSafety(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed)) //nolint:gosec // picks the crash point
			// Operations that take a while, so that the crash lands in the
			// middle of them.
			slow, cfg := newEmulator(t, arm.Options{OperationDelay: 30 * time.Millisecond})
			az := newAzure(t, cfg)
			stop := startControllers(t, cfg)
			f := newCluster(t, fmt.Sprintf("crash%d", seed))
			f.waitClusterProvisioned(time.Minute)
			// The machines are all there before the manager that will crash
			// starts, so the crash point counts from zero.
			stop()
			names := f.machineSet("crash", 20)
			stop = startControllers(t, cfg)
			start := totalCalls(slow)
			crashAt := start + int64(10+rng.Intn(150))
			for tick := time.NewTicker(time.Millisecond); totalCalls(slow) < crashAt; {
				<-tick.C
			}
			stop()
			t.Logf("manager stopped after %d ARM calls, with %d of 20 VMs made", totalCalls(slow)-start, len(az.inventory(f.ns)["virtualMachines"]))
			if provisioned := f.countProvisioned(names); provisioned == 20 {
				t.Fatal("every machine was provisioned before the crash: the test crashed nothing")
			}

			stop = startControllers(t, cfg)
			defer stop()
			ams := f.waitMachinesProvisioned(2*time.Minute, names...)
			checkOneOfEach(t, az, f.ns, 20)
			var objs []client.Object
			for _, am := range ams {
				objs = append(objs, am)
			}
			f.deleteAndWait(2*time.Minute, objs...)
			checkOneOfEach(t, az, f.ns, 0)
			f.deleteAndWait(time.Minute, f.ac)
			if _, err := az.groups.Get(context.Background(), f.ns, nil); err == nil {
				t.Fatal("the cluster's resource group outlived it")
			}
		})
	}
}

// TestThrottlingAndServerErrors runs against an emulator that answers 20% of
// requests with 429 and 5% with 500: every machine still provisions, and the
// number of calls stays bounded (no hot loop), before and after.
func TestThrottlingAndServerErrors(t *testing.T) {
	faulty, cfg := newEmulator(t, arm.Options{Seed: 42, Faults: []arm.Fault{{Percent: 20, Status: 429}, {Percent: 5, Status: 500}}})
	stop := startControllers(t, cfg)
	defer stop()

	f := newCluster(t, "throttled")
	f.waitClusterProvisioned(2 * time.Minute)
	clusterCalls := totalCalls(faulty)
	names := f.machineSet("thr", 10)
	f.waitMachinesProvisioned(2*time.Minute, names...)
	checkOneOfEach(t, newAzure(t, cfg), f.ns, 10)
	perMachine := float64(totalCalls(faulty)-clusterCalls) / 10
	t.Logf("cluster: %d ARM calls; machines: %.1f ARM calls each, with 20%% 429s and 5%% 500s", clusterCalls, perMachine)
	// Every refused call returns to the controller (the SDK makes one try),
	// and the reconcile starts over with its reads: about 90 calls a
	// machine at these rates, against about 26 without faults.
	if perMachine > 150 {
		t.Fatalf("%.1f ARM calls per machine: the controllers retry too eagerly", perMachine)
	}
	// Once everything is provisioned, calls die down: what remains is at
	// most a late retry of an earlier failure per object (their backoff
	// grows), and the reconcile each machine's last status write wakes,
	// which fails one call in four and so tries again (a second later, the
	// shortest wait after a 429) about four times before one goes through;
	// never a loop. A hot loop at the 50 ms requeue would make thousands of
	// calls in this window.
	settled := totalCalls(faulty)
	<-time.After(3 * time.Second)
	if extra := totalCalls(faulty) - settled; extra > 300 {
		t.Fatalf("%d ARM calls in the 3 s after everything was provisioned: a hot loop", extra)
	} else {
		t.Logf("%d ARM calls in the 3 s after everything was provisioned", extra)
	}
}

// newEmulator starts an emulator of the test's own.
func newEmulator(t testing.TB, o arm.Options) (*arm.Server, endpoint.Config) {
	t.Helper()
	o.Token, o.PollInterval, o.Runtime = token, 10*time.Millisecond, &arm.RecordingRuntime{}
	s, err := arm.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, endpoint.Config{ResourceManagerEndpoint: s.URL(), CACertPEM: s.CACertPEM(), Credential: endpoint.StaticToken(token),
		Retry: &policy.RetryOptions{MaxRetries: 3, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: time.Second}}
}

// TestVMProvisioningFailureIsACondition: Azure failing a VM (here
// OSProvisioningTimedOut) shows on the AzureMachine's Ready condition with
// Azure's code and message, and the machine is not reported provisioned.
func TestVMProvisioningFailureIsACondition(t *testing.T) {
	_, cfg := newEmulator(t, arm.Options{ProvisioningFailures: []arm.ProvisioningFailure{{NameContains: "doomed", Code: "OSProvisioningTimedOut"}}})
	stop := startControllers(t, cfg)
	defer stop()
	f := newCluster(t, "failing")
	f.waitClusterProvisioned(time.Minute)
	am := f.newMachine("failing-md-doomed-abcde", false, false, "")
	var cond string
	poll.Until(t, time.Minute, func() string {
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(am), am); err != nil {
			return err.Error()
		}
		// Cluster API's patch helper writes conditions and the rest of the
		// status in two requests: wait for both halves.
		if c := conditions.Get(am, "Ready"); c != nil && c.Reason == "VMProvisionFailed" && am.Status.VMState != "" {
			cond = c.Message
			return ""
		}
		return fmt.Sprintf("no VMProvisionFailed condition and vmState yet: %q %+v", am.Status.VMState, am.Status.Conditions)
	})
	if !strings.Contains(cond, "OSProvisioningTimedOut") || !strings.Contains(cond, "did not finish in the allotted time") {
		t.Fatalf("condition message %q lacks Azure's code and message", cond)
	}
	if am.Status.Initialization.Provisioned != nil && *am.Status.Initialization.Provisioned {
		t.Fatal("a failed VM was reported provisioned")
	}
	if am.Status.VMState != "Failed" {
		t.Fatalf("vmState %q, want Failed", am.Status.VMState)
	}
}
