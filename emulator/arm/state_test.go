package arm_test

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

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
