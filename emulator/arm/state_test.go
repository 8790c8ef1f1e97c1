package arm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

// saveOnChange keeps path up to date from OnChange alone, as a caller
// persisting the emulator as it changes would (without coalescing).
type saveOnChange struct {
	changes chan struct{}
	marks   atomic.Int64
	saves   atomic.Int64
}

func (c *saveOnChange) onChange() {
	c.marks.Add(1)
	select {
	case c.changes <- struct{}{}:
	default:
	}
}

func (c *saveOnChange) run(t *testing.T, srv *arm.Server, path string) {
	stop := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(stop); <-stopped })
	go func() {
		defer close(stopped)
		for {
			select {
			case <-c.changes:
				if err := srv.Save(path); err != nil {
					t.Error(err)
				}
				c.saves.Add(1)
			case <-stop:
				return
			}
		}
	}()
}

// OnChange follows what Save writes: the outcome of an operation that
// finishes after its request (here a provisioning that fails) reaches the
// saved state without a Save at the end, and reads change nothing.
func TestOnChangeKeepsTheSavedStateCurrent(t *testing.T) {
	t.Parallel() // it waits out boots and a quiet second, alone in its world
	c := &saveOnChange{changes: make(chan struct{}, 1)}
	w := newWorld(t, func(o *arm.Options) {
		o.OnChange = c.onChange
		// The request's own save happens long before the operation ends.
		o.BootDelayLinux = 300 * time.Millisecond
		o.ProvisioningFailures = []arm.ProvisioningFailure{{NameContains: "doomed", Code: "OSProvisioningTimedOut"}}
	})
	path := filepath.Join(t.TempDir(), "state.json")
	c.run(t, w.srv, path)
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	nic2 := w.nic("rg", "nic2", *nic.Properties.IPConfigurations[0].Properties.Subnet.ID)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "#cloud-config\n"), nil))
	_ = pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "doomed-vm", linuxVM(*nic2.ID, ""), nil))

	// The VMs' boots end on the emulator's own timers (BootDelayLinux), which
	// mark changes of their own: reads are measured once those are over, a
	// quiet second after the last mark.
	poll.Until(t, 30*time.Second, func() string {
		before := c.marks.Load()
		<-time.After(time.Second)
		if n := c.marks.Load(); n != before {
			return fmt.Sprintf("%d changes marked in the last second", n-before)
		}
		return ""
	})
	marks := c.marks.Load()
	_ = must(vms.Get(w.ctx, "rg", "vm", nil))
	for pager := vms.NewListPager("rg", nil); pager.More(); {
		_ = must(pager.NextPage(w.ctx))
	}
	if n := c.marks.Load(); n != marks {
		t.Fatalf("reads marked the state changed %d times", n-marks)
	}

	// The emulator's last change (the failed provisioning) is saved once
	// its mark is handled; a second world loads what a kill would leave.
	var w2 *world
	poll.Until(t, 30*time.Second, func() string {
		if len(c.changes) > 0 {
			return "a change is not saved yet"
		}
		w2 = newWorld(t, nil)
		if err := w2.srv.Load(path); err != nil {
			_ = w2.srv.Close()
			return err.Error()
		}
		vm, err := must(w2.compute.NewVirtualMachinesClient(), nil).Get(w2.ctx, "rg", "doomed-vm", nil)
		if err != nil {
			_ = w2.srv.Close()
			return err.Error()
		}
		if st := *vm.Properties.ProvisioningState; st != "Failed" {
			_ = w2.srv.Close()
			return "the saved doomed VM is " + st + ", want Failed"
		}
		return ""
	})
	ms := waitRunning(t, w2.rt, 1)
	if string(ms[0].CustomData) != "#cloud-config\n" {
		t.Fatalf("the loaded VM was booted with custom data %q", ms[0].CustomData)
	}
}

// Save keeps each resource's entry until the resource changes, and writes
// the file from those entries: the file must stay what encoding/json makes
// of the whole state, through creates, updates, power actions, scale-set
// changes and deletes, including what an operation under way saves.
func TestSaveWritesWhatEncodingEveryResourceWrites(t *testing.T) {
	w := newWorld(t, func(o *arm.Options) { o.OperationDelay = 0 })
	path := filepath.Join(t.TempDir(), "state.json")
	same := func(step string) {
		t.Helper()
		if err := w.srv.Save(path); err != nil {
			t.Fatal(err)
		}
		kept, fresh, err := w.srv.EncodeStateBothWays()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(kept, fresh) {
			t.Fatalf("%s: Save writes\n%s\nencoding every resource afresh writes\n%s", step, kept, fresh)
		}
		if !json.Valid(kept) {
			t.Fatalf("%s: Save writes invalid JSON", step)
		}
	}
	same("an empty emulator")
	w.group("rg")
	w.group("other")
	subnetID := w.network("rg")
	same("groups and a network")

	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	nic := w.nic("rg", "nic", subnetID)
	winNIC := w.nic("rg", "win-nic", subnetID)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "#cloud-config\n"), nil))
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "win", windowsVM(*winNIC.ID, "win", "<powershell></powershell>"), nil))
	sets := must(w.compute.NewVirtualMachineScaleSetsClient(), nil)
	done(sets.BeginCreateOrUpdate(w.ctx, "rg", "pool", scaleSet(subnetID, "pool", "v1", 2), nil))
	waitRunning(t, w.rt, 4)
	same("VMs and a scale set")

	done(vms.BeginUpdate(w.ctx, "rg", "vm", armcompute.VirtualMachineUpdate{Tags: map[string]*string{"k": to.Ptr("v")}}, nil))
	same("a VM's tags updated")
	done(vms.BeginDeallocate(w.ctx, "rg", "win", nil))
	same("a VM deallocated")
	done(sets.BeginCreateOrUpdate(w.ctx, "rg", "pool", scaleSet(subnetID, "pool", "v2", 3), nil))
	same("a scale set's new model and capacity")
	done(sets.BeginDeleteInstances(w.ctx, "rg", "pool", armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: []*string{to.Ptr("0")}}, nil))
	same("a scale-set instance deleted")
	done(vms.BeginDelete(w.ctx, "rg", "vm", nil))
	same("a VM deleted (its NIC detached)")

	// An operation under way is saved as finished.
	slow := newWorld(t, func(o *arm.Options) { o.BootDelayLinux = time.Hour })
	slow.group("rg")
	slowNIC := slow.nic("rg", "nic", slow.network("rg"))
	slowVMs := must(slow.compute.NewVirtualMachinesClient(), nil)
	if _, err := slowVMs.BeginCreateOrUpdate(slow.ctx, "rg", "vm", linuxVM(*slowNIC.ID, ""), nil); err != nil {
		t.Fatal(err)
	}
	w = slow
	same("a VM being created")
	if !bytes.Contains(must(os.ReadFile(path)), []byte(`"provisioningState":"Succeeded"`)) {
		t.Fatal("a VM being created is not saved as provisioned")
	}
}
