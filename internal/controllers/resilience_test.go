package controllers_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
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
	parallel(t)
	seeds := []int64{1, 2, 3, 4}
	if testing.Short() {
		// The fast loop (-short) tries one crash point; make test all four.
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
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
	parallel(t)
	faulty, cfg := newEmulator(t, arm.Options{Seed: 42, Faults: []arm.Fault{{Percent: 20, Status: 429}, {Percent: 5, Status: 500}}})
	// The emulator's 429s ask for 20 ms; at the default floor of a second
	// each of the many 429s parks its object for a second, and the test
	// spends most of its time waiting them out. The requeue (50 ms) is
	// the floor instead: retries still wait, so a hot loop still shows.
	stop := startControllersWith(t, cfg, func(o *controllers.Options) { o.MinThrottleWait = o.Requeue })
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
	// which fails one call in four and so tries again (after the shortest
	// wait after a 429) about four times before one goes through;
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
	o.Token, o.PollInterval = token, 10*time.Millisecond
	if o.Runtime == nil {
		o.Runtime = &arm.RecordingRuntime{}
	}
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

// readyOfMachine reads an AzureMachine and its Ready condition.
func (f *fixture) readyOfMachine(name string) (*infrav1.AzureMachine, *metav1.Condition, error) {
	am := &infrav1.AzureMachine{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, am); err != nil {
		return nil, nil, err
	}
	return am, conditions.Get(am, "Ready"), nil
}

// TestVMCreateFailuresAreRetried: a VM creation Azure fails for capacity
// (AllocationFailed) or a slow guest (OSProvisioningTimedOut) shows on the
// AzureMachine's Ready condition with Azure's code and message, is sent
// again while it fails, and the machine is provisioned once Azure makes
// the VM. A failure only a new Machine fixes (OSProvisioningClientError)
// stays failed and is not sent again.
func TestVMCreateFailuresAreRetried(t *testing.T) {
	parallel(t)
	srv, cfg := newEmulator(t, arm.Options{ProvisioningFailures: []arm.ProvisioningFailure{
		{NameContains: "alloc", Code: "AllocationFailed", Operation: arm.OperationCreate},
		{NameContains: "slowos", Code: "OSProvisioningTimedOut", Operation: arm.OperationCreate},
		{NameContains: "badimg", Code: "OSProvisioningClientError", Message: "OS provisioning failed: the image was not generalized.", Operation: arm.OperationCreate},
	}})
	stop := startControllers(t, cfg)
	defer stop()
	f := newCluster(t, "failing")
	f.waitClusterProvisioned(time.Minute)
	for name, text := range map[string]string{"failing-md-alloc-abcde": "sufficient capacity", "failing-md-slowos-abcde": "did not finish in the allotted time", "failing-md-badimg-abcde": "not generalized"} {
		f.newMachine(name, false, false, "")
		code := map[bool]string{true: "AllocationFailed", false: "OSProvisioningTimedOut"}[strings.Contains(name, "alloc")]
		reason := "VMFailed"
		if strings.Contains(name, "badimg") {
			code, reason = "OSProvisioningClientError", "VMProvisionFailed"
		}
		poll.Until(t, time.Minute, func() string {
			am, c, err := f.readyOfMachine(name)
			if err != nil {
				return err.Error()
			}
			// Cluster API's patch helper writes conditions and the rest of
			// the status in two requests: wait for both halves.
			if c == nil || c.Reason != reason || am.Status.VMState != "Failed" {
				return fmt.Sprintf("%s: no %s condition and vmState Failed yet: %q %+v", name, reason, am.Status.VMState, am.Status.Conditions)
			}
			if !strings.Contains(c.Message, code) || !strings.Contains(c.Message, text) {
				return fmt.Sprintf("%s: condition message %q lacks Azure's code %s and message", name, c.Message, code)
			}
			if ptr.Deref(am.Status.Initialization.Provisioned, false) {
				return "a failed VM was reported provisioned"
			}
			return ""
		})
	}
	// Sent again while it fails: each retry is one more failed creation.
	poll.Until(t, time.Minute, func() string {
		c := srv.FaultConfig().ProvisioningFailures
		if c[0].Failed < 3 || c[1].Failed < 3 {
			return fmt.Sprintf("creations failed %d and %d times: the failed VMs are not sent again", c[0].Failed, c[1].Failed)
		}
		return ""
	})
	if n := srv.FaultConfig().ProvisioningFailures[2].Failed; n != 1 {
		t.Fatalf("the creation Azure refused for its image was sent %d times, want once", n)
	}
	// Azure has capacity again, the guest reports in time: the machines
	// are made. The image that was not prepared stays refused.
	srv.SetFaults(arm.FaultConfig{ProvisioningFailures: []arm.ProvisioningFailure{{NameContains: "badimg", Code: "OSProvisioningClientError", Operation: arm.OperationCreate}}})
	ams := f.waitMachinesProvisioned(time.Minute, "failing-md-alloc-abcde", "failing-md-slowos-abcde")
	for name, am := range ams {
		if c := conditions.Get(am, "Ready"); c == nil || c.Status != metav1.ConditionTrue {
			t.Fatalf("%s provisioned and not Ready: %+v", name, c)
		}
	}
	if _, c, err := f.readyOfMachine("failing-md-badimg-abcde"); err != nil || c == nil || c.Reason != "VMProvisionFailed" {
		t.Fatalf("the machine whose image Azure refused: %+v, %v", c, err)
	}
	if n := srv.FaultConfig().ProvisioningFailures[0].Failed; n != 0 {
		t.Fatalf("the creation Azure refused for its image was sent again %d times", n)
	}
}

// attachDisk attaches a new empty disk to a VM as the Azure Disk CSI
// driver does: a PUT of the VM holding its location and data disks only.
func (a *azure) attachDisk(rg, vm, disk string) error {
	ctx := context.Background()
	p, err := a.disks.BeginCreateOrUpdate(ctx, rg, disk, armcompute.Disk{Location: to.Ptr("westeurope"), SKU: &armcompute.DiskSKU{Name: to.Ptr(armcompute.DiskStorageAccountTypesPremiumLRS)},
		Properties: &armcompute.DiskProperties{CreationData: &armcompute.CreationData{CreateOption: to.Ptr(armcompute.DiskCreateOptionEmpty)}, DiskSizeGB: to.Ptr[int32](4)}}, nil)
	if err != nil {
		return err
	}
	d, err := p.PollUntilDone(ctx, nil)
	if err != nil {
		return err
	}
	return a.putDataDisks(rg, vm, []*armcompute.DataDisk{{Lun: to.Ptr[int32](0), CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesAttach), ManagedDisk: &armcompute.ManagedDiskParameters{ID: d.ID}}})
}

func (a *azure) putDataDisks(rg, vm string, disks []*armcompute.DataDisk) error {
	ctx := context.Background()
	p, err := a.vms.BeginCreateOrUpdate(ctx, rg, vm, armcompute.VirtualMachine{Location: to.Ptr("westeurope"),
		Properties: &armcompute.VirtualMachineProperties{StorageProfile: &armcompute.StorageProfile{DataDisks: disks}}}, nil)
	if err != nil {
		return err
	}
	_, err = p.PollUntilDone(ctx, nil)
	return err
}

// TestRunningVMThatGoesFailedRecovers: a data-disk attach that Azure fails
// leaves a running VM Failed. The machine says so (Ready False with Azure's
// code) and stays provisioned, winkube keeps reading it without writing
// it, and the machine is Ready again once the disk driver's next attach
// succeeds and Azure reports the VM Succeeded.
func TestRunningVMThatGoesFailedRecovers(t *testing.T) {
	parallel(t)
	srv, cfg := newEmulator(t, arm.Options{})
	stop := startControllers(t, cfg)
	defer stop()
	az := newAzure(t, cfg)
	f := newCluster(t, "recover")
	f.waitClusterProvisioned(time.Minute)
	name := "recover-md-disky-abcde"
	f.newMachine(name, false, false, "")
	vm := f.waitMachinesProvisioned(time.Minute, name)[name].Status.VMName
	srv.SetFaults(arm.FaultConfig{ProvisioningFailures: []arm.ProvisioningFailure{{NameContains: vm, Code: "AttachDiskWhileBeingDetached",
		Message: "Cannot attach data disk 'pvc-1' to VM because the disk is currently being detached or the last detach operation failed.", Operation: arm.OperationAttachDataDisk, Times: 1}}})
	if err := az.attachDisk(f.ns, vm, "pvc-1"); err == nil {
		t.Fatal("the injected attach failure did not fail the attach")
	}
	vmPuts := srv.Counters()["PUT virtualMachines"]
	// Nothing about the machine changed, so nothing wakes it: a Machine
	// update does, as Cluster API's own writes would.
	touch := func() {
		m := &clusterv1.Machine{}
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, m); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(m.DeepCopy())
		m.Labels["touched"] = fmt.Sprint(time.Now().UnixNano())
		if err := env.Client.Patch(f.ctx, m, patch); err != nil {
			t.Fatal(err)
		}
	}
	touch()
	poll.Until(t, time.Minute, func() string {
		am, c, err := f.readyOfMachine(name)
		if err != nil {
			return err.Error()
		}
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "VMFailed" || am.Status.VMState != "Failed" ||
			!strings.Contains(c.Message, "AttachDiskWhileBeingDetached") || !strings.Contains(c.Message, "currently being detached") {
			return fmt.Sprintf("the Failed VM is not on the machine's Ready condition with Azure's code: vmState %q %+v", am.Status.VMState, c)
		}
		if !ptr.Deref(am.Status.Initialization.Provisioned, false) {
			return "a machine whose VM ran is no longer provisioned"
		}
		return ""
	})
	if n := srv.Counters()["PUT virtualMachines"]; n != vmPuts {
		t.Fatalf("winkube wrote a VM that ran and went Failed (%d PUTs)", n-vmPuts)
	}
	// The driver's retry succeeds: Azure reports the VM Succeeded, and the
	// machine, rechecked on its own, is Ready again.
	if err := az.putDataDisks(f.ns, vm, nil); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		am, c, err := f.readyOfMachine(name)
		if err != nil {
			return err.Error()
		}
		if c == nil || c.Status != metav1.ConditionTrue || am.Status.VMState != "Succeeded" {
			return fmt.Sprintf("the machine is not Ready again: vmState %q %+v", am.Status.VMState, c)
		}
		return ""
	})
}

// TestVMBeingUpdatedStaysReady: a VM that ran and is being updated (a
// data-disk attach under way) is still a running machine: Ready, with
// vmState Updating, not "creating the VM".
func TestVMBeingUpdatedStaysReady(t *testing.T) {
	parallel(t)
	srv, cfg := newEmulator(t, arm.Options{})
	stop := startControllers(t, cfg)
	defer stop()
	az := newAzure(t, cfg)
	f := newCluster(t, "updating")
	f.waitClusterProvisioned(time.Minute)
	name := "updating-md-disky-abcde"
	f.newMachine(name, false, false, "")
	vm := f.waitMachinesProvisioned(time.Minute, name)[name].Status.VMName
	// An attach that takes a while, as Azure's do.
	srv.SetFaults(arm.FaultConfig{Faults: []arm.Fault{{Method: "PUT", Kind: "virtualMachines", OperationDelay: time.Hour}}})
	p, err := az.vms.BeginCreateOrUpdate(f.ctx, f.ns, vm, armcompute.VirtualMachine{Location: to.Ptr("westeurope"),
		Properties: &armcompute.VirtualMachineProperties{StorageProfile: &armcompute.StorageProfile{DataDisks: []*armcompute.DataDisk{{
			Lun: to.Ptr[int32](0), CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesEmpty), DiskSizeGB: to.Ptr[int32](4)}}}}}, nil)
	if err != nil || p.Done() {
		t.Fatalf("the attach did not start: %v", err)
	}
	m := &clusterv1.Machine{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, m); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(m.DeepCopy())
	m.Labels["touched"] = "1"
	if err := env.Client.Patch(f.ctx, m, patch); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		am, c, err := f.readyOfMachine(name)
		if err != nil {
			return err.Error()
		}
		if am.Status.VMState != "Updating" || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Sprintf("a VM being updated: vmState %q, Ready %+v; want Updating and Ready", am.Status.VMState, c)
		}
		return ""
	})
}
