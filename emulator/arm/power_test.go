package arm_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

// gate holds the runtime's Boot and Halt while closed, so that a test sees
// the state a VM is in while the runtime works.
type gate struct {
	closed atomic.Bool
	open   chan struct{}
}

func newGate(w *world) *gate {
	g := &gate{open: make(chan struct{})}
	w.rt.Hold = func(op, _ string) {
		if op != "stop" && g.closed.Load() {
			<-g.open
		}
	}
	return g
}

func (g *gate) hold() { g.open = make(chan struct{}); g.closed.Store(true) }

func (g *gate) release() { g.closed.Store(false); close(g.open) }

func powerOf(t testing.TB, statuses []*armcompute.InstanceViewStatus) string {
	t.Helper()
	for _, s := range statuses {
		if strings.HasPrefix(*s.Code, "PowerState/") {
			return strings.TrimPrefix(*s.Code, "PowerState/")
		}
	}
	t.Fatal("the instance view has no PowerState")
	return ""
}

func (w *world) vmPower(rg, name string) string {
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	return powerOf(w.t, must(vms.InstanceView(w.ctx, rg, name, nil)).Statuses)
}

func (w *world) waitPower(what string, power func() string, want string) {
	w.t.Helper()
	poll.Until(w.t, 10*time.Second, func() string {
		if got := power(); got != want {
			return fmt.Sprintf("%s is %s, want %s", what, got, want)
		}
		return ""
	})
}

// TestVMPowerStatesThroughLife: a VM's instance view goes through starting,
// running, stopping, stopped, deallocating, deallocated as Azure's power
// actions move it, and the runtime switches the machine off and on.
func TestVMPowerStatesThroughLife(t *testing.T) {
	w := newWorld(t, nil)
	g := newGate(w)
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	power := func() string { return w.vmPower("rg", "vm") }

	g.hold()
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, ""), nil))
	if p := power(); p != "starting" {
		t.Fatalf("a VM whose machine is still booting is %s, want starting", p)
	}
	g.release()
	w.waitPower("the new VM", power, "running")
	// A restart of a running VM switches it off and on again.
	done(vms.BeginRestart(w.ctx, "rg", "vm", nil))
	w.waitPower("the restarted VM", power, "running")
	if len(w.rt.Halted()) != 1 || len(w.rt.Running()) != 1 {
		t.Fatalf("restart: halted %v, running %d; want one halt and the machine running again", w.rt.Halted(), len(w.rt.Running()))
	}

	for _, step := range []struct {
		action        string
		during, after string
	}{{"powerOff", "stopping", "stopped"}, {"start", "starting", "running"}, {"deallocate", "deallocating", "deallocated"}, {"start", "starting", "running"}} {
		g.hold()
		var err error
		switch step.action {
		case "powerOff":
			_, err = vms.BeginPowerOff(w.ctx, "rg", "vm", nil)
		case "start":
			_, err = vms.BeginStart(w.ctx, "rg", "vm", nil)
		case "deallocate":
			_, err = vms.BeginDeallocate(w.ctx, "rg", "vm", nil)
		}
		if err != nil {
			t.Fatalf("%s: %v", step.action, err)
		}
		if p := power(); p != step.during {
			t.Fatalf("during %s the VM is %s, want %s", step.action, p, step.during)
		}
		g.release()
		w.waitPower("the VM after "+step.action, power, step.after)
		if running := len(w.rt.Running()) == 1; running != (step.after == "running") {
			t.Fatalf("after %s the machine runs: %v", step.action, running)
		}
		if step.after == "stopped" {
			// A stopped VM is started, not restarted.
			re := azureCode(t, pollErr(vms.BeginRestart(w.ctx, "rg", "vm", nil)), "OperationNotAllowed")
			if re.StatusCode != 409 {
				t.Fatalf("restart of a stopped VM: status %d", re.StatusCode)
			}
		}
	}
	// Deleting a switched-off VM removes its machine (and disk) too.
	done(vms.BeginPowerOff(w.ctx, "rg", "vm", nil))
	done(vms.BeginDelete(w.ctx, "rg", "vm", nil))
	if s := w.rt.Stopped(); len(s) != 1 || !strings.HasSuffix(s[0], "/vm") {
		t.Fatalf("stopped %v, want the deleted VM", s)
	}
}

// TestPowerActionPreemptedByALaterOperation: a restart that a PUT of the
// VM, or its deletion, overtakes before it ran is canceled as Azure
// cancels it (Canceled, OperationPreempted), not reported done with the
// machine never restarted; after a PUT the VM stays as it was (running, or
// stopped when its start was overtaken), and its instance view no longer
// shows the action's pending state.
func TestPowerActionPreemptedByALaterOperation(t *testing.T) {
	w := newWorld(t, func(o *arm.Options) { o.BootDelayLinux = 300 * time.Millisecond })
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	vm := linuxVM(*nic.ID, "")
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", vm, nil))
	w.waitPower("the new VM", func() string { return w.vmPower("rg", "vm") }, "running")

	restart := must(vms.BeginRestart(w.ctx, "rg", "vm", nil))
	vm.Tags = map[string]*string{"owner": to.Ptr("team-a")}
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", vm, nil))
	_, err := restart.PollUntilDone(w.ctx, nil)
	azureCode(t, err, "OperationPreempted")
	if h := w.rt.Halted(); len(h) != 0 {
		t.Errorf("a preempted restart switched the machine off: halted %v", h)
	}
	w.waitPower("the VM after its preempted restart", func() string { return w.vmPower("rg", "vm") }, "running")

	// A stopped VM whose start is overtaken stays stopped.
	done(vms.BeginPowerOff(w.ctx, "rg", "vm", nil))
	start := must(vms.BeginStart(w.ctx, "rg", "vm", nil))
	vm.Tags["owner"] = to.Ptr("team-b")
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", vm, nil))
	_, err = start.PollUntilDone(w.ctx, nil)
	azureCode(t, err, "OperationPreempted")
	if p := w.vmPower("rg", "vm"); p != "stopped" || len(w.rt.Running()) != 0 {
		t.Errorf("a stopped VM whose start was preempted is %s, %d machines running; want stopped, none", p, len(w.rt.Running()))
	}
	done(vms.BeginStart(w.ctx, "rg", "vm", nil))
	w.waitPower("the VM started again", func() string { return w.vmPower("rg", "vm") }, "running")

	restart = must(vms.BeginRestart(w.ctx, "rg", "vm", nil))
	done(vms.BeginDelete(w.ctx, "rg", "vm", nil))
	_, err = restart.PollUntilDone(w.ctx, nil)
	azureCode(t, err, "OperationPreempted")
	if s := w.rt.Stopped(); len(s) != 1 {
		t.Errorf("stopped %v, want the deleted VM's machine", s)
	}
}

// TestScaleSetInstancePower: scale-set instances have the same power
// states, moved by the scale set's actions (for some or all instances) and
// by each instance's own.
func TestScaleSetInstancePower(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")
	sets := must(w.compute.NewVirtualMachineScaleSetsClient(), nil)
	insts := must(w.compute.NewVirtualMachineScaleSetVMsClient(), nil)
	done(sets.BeginCreateOrUpdate(w.ctx, "rg", "pool", scaleSet(subnet, "win", "v1", 2), nil))
	power := func(id string) func() string {
		return func() string { return powerOf(t, must(insts.GetInstanceView(w.ctx, "rg", "pool", id, nil)).Statuses) }
	}
	w.waitPower("instance 0", power("0"), "running")
	w.waitPower("instance 1", power("1"), "running")

	done(sets.BeginPowerOff(w.ctx, "rg", "pool", &armcompute.VirtualMachineScaleSetsClientBeginPowerOffOptions{
		VMInstanceIDs: &armcompute.VirtualMachineScaleSetVMInstanceIDs{InstanceIDs: []*string{to.Ptr("0")}}}))
	if p0, p1 := power("0")(), power("1")(); p0 != "stopped" || p1 != "running" {
		t.Fatalf("after powering off instance 0: %s and %s", p0, p1)
	}
	done(insts.BeginDeallocate(w.ctx, "rg", "pool", "1", nil))
	if p := power("1")(); p != "deallocated" {
		t.Fatalf("deallocated instance is %s", p)
	}
	if n := len(w.rt.Running()); n != 0 {
		t.Fatalf("%d machines run with both instances off", n)
	}
	// An unknown instance is refused, as Azure does.
	_, err := sets.BeginStart(w.ctx, "rg", "pool", &armcompute.VirtualMachineScaleSetsClientBeginStartOptions{
		VMInstanceIDs: &armcompute.VirtualMachineScaleSetVMInstanceIDs{InstanceIDs: []*string{to.Ptr("7")}}})
	azureCode(t, err, "InvalidParameter")
	// Start with no instance IDs starts them all.
	done(sets.BeginStart(w.ctx, "rg", "pool", nil))
	w.waitPower("instance 0", power("0"), "running")
	w.waitPower("instance 1", power("1"), "running")
	waitRunning(t, w.rt, 2)
	done(insts.BeginRestart(w.ctx, "rg", "pool", "1", nil))
	w.waitPower("instance 1", power("1"), "running")
}

// TestStoppedVMStaysOffAcrossSaveAndLoad: a restarted emulator does not boot
// a VM that was switched off; starting it boots it.
func TestStoppedVMStaysOffAcrossSaveAndLoad(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, ""), nil))
	done(vms.BeginDeallocate(w.ctx, "rg", "vm", nil))
	path := t.TempDir() + "/state.json"
	if err := w.srv.Save(path); err != nil {
		t.Fatal(err)
	}
	w2 := newWorld(t, nil)
	if err := w2.srv.Load(path); err != nil {
		t.Fatal(err)
	}
	if p := w2.vmPower("rg", "vm"); p != "deallocated" || len(w2.rt.Running()) != 0 {
		t.Fatalf("loaded VM is %s with %d machines running, want deallocated and none", p, len(w2.rt.Running()))
	}
	vms2 := must(w2.compute.NewVirtualMachinesClient(), nil)
	done(vms2.BeginStart(w2.ctx, "rg", "vm", nil))
	w2.waitPower("the started VM", func() string { return w2.vmPower("rg", "vm") }, "running")
	waitRunning(t, w2.rt, 1)
}
