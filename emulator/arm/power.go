package arm

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// powerActions are the power operations Azure offers on VMs, scale sets and
// scale-set instances (POST .../start, powerOff, restart, deallocate; the
// Compute REST spec), each with the state the instance view shows while it
// runs.
var powerActions = map[string]string{
	"start":      "starting",
	"poweroff":   "stopping",
	"restart":    "starting",
	"deallocate": "deallocating",
}

// powerDone is the state an action leaves the machine in; "" is running.
var powerDone = map[string]string{"poweroff": "stopped", "deallocate": "deallocated"}

// powerState is what the instance view reports as PowerState/...: an
// action's state while it runs or once it stopped the machine, otherwise
// starting until the runtime has booted it and running after.
func powerState(r *resource) string {
	if p, ok := r.secrets["power"].(string); ok && p != "" {
		return p
	}
	if r.up {
		return "running"
	}
	return "starting"
}

func switchedOff(r *resource) bool {
	p := powerState(r)
	return p == "stopped" || p == "deallocated" || p == "stopping" || p == "deallocating"
}

// servePower runs a power action on a VM, an instance, or a scale set's
// instances (those in the body's instanceIds, or all of them).
func (s *Server) servePower(w http.ResponseWriter, r *http.Request, id resourceID, res *resource, action string, body map[string]any) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	targets := []*resource{res}
	vmss := res
	if res.kind.typ == kindVMSS {
		targets = nil
		want := map[string]bool{}
		for _, iid := range list(body, "instanceIds") {
			is, _ := iid.(string)
			want[is] = true
			if inst := s.lookup(id.Child("virtualMachines", is).String()); inst == nil || inst.deleting {
				unlock()
				writeError(w, errorf(http.StatusBadRequest, "InvalidParameter", "The provided instanceId %s is not an active Virtual Machine Scale Set VM instanceId.", is))
				return
			}
		}
		for _, inst := range s.liveInstances(res) {
			if len(want) == 0 || want[inst.id.Name()] {
				targets = append(targets, inst)
			}
		}
	} else if res.kind.typ == kindInstance {
		parent, _ := res.id.Parent()
		vmss = s.lookup(parent.String())
	}
	for _, t := range targets {
		if e := powerRefused(t, action); e != nil {
			unlock()
			writeError(w, e)
			return
		}
	}
	op := s.startOperation(w, r, id.Subscription, id.Namespace, str(res.body, "location"))
	before, _ := res.secrets["power"].(string) // what a preempted action leaves
	for _, t := range targets {
		t.secrets["power"] = powerActions[action]
		t.touch()
	}
	delay := s.opts.OperationDelay
	if action == "start" || action == "restart" {
		delay += bootDelay(s, vmss)
	}
	s.after(delay, func() {
		if res.kind.typ != kindVMSS && s.preempt(op, res, before) {
			return
		}
		// The runtime switches machines off outside the lock: it may take
		// a while, and the instance view shows the action meanwhile.
		if action != "start" && s.opts.Runtime != nil {
			for _, t := range targets {
				if t.booted && !s.isDeleting(t) {
					_ = s.opts.Runtime.Halt(context.Background(), t.idStr)
				}
			}
		}
		s.mu.Lock()
		var boot, fresh []Machine
		for _, t := range targets {
			if s.lookup(t.idStr) != t || t.deleting {
				continue
			}
			if final := powerDone[action]; final != "" {
				t.up = false
				t.secrets["power"] = final
				t.touch()
				continue
			}
			switch {
			case action == "start" && t.up:
				delete(t.secrets, "power") // already running: nothing to do
				t.touch()
				continue
			case s.opts.Runtime == nil:
				t.up = true
				delete(t.secrets, "power")
				t.touch()
				continue
			}
			t.up = false
			m := s.vmMachine(vmss, t)
			if t.booted {
				boot = append(boot, m)
			} else {
				fresh = append(fresh, m) // loaded switched off: never booted here
			}
		}
		s.finishOperation(op, nil)
		s.mu.Unlock()
		s.bootMachines(fresh)
		for _, m := range boot {
			go s.boot(m)
		}
	})
	unlock()
	w.WriteHeader(http.StatusAccepted)
}

// preempt ends a VM's (or one instance's) power action that a later
// operation on the same machine overtook before it ran: a PUT or PATCH of
// the VM (which writes a new model; the action's pending state came with
// it) or its deletion. Azure cancels the older operation, whose status
// becomes Canceled with OperationPreempted ("Operation execution has been
// preempted by a more recent operation.", as Azure's SDKs and Terraform
// report it: Azure/azure-sdk-for-java#1783, osbuild/osbuild-composer#1447),
// and the machine is left as the newer operation has it: in the power
// state it had before the action (before). Without this the action
// finished as Succeeded having done nothing, and a caller waiting for the
// restart it was told had happened waited for ever.
func (s *Server) preempt(op *operation, t *resource, before string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.lookup(t.idStr)
	if cur == t && !t.deleting {
		return false
	}
	if cur != nil && !cur.deleting {
		if before == "" {
			delete(cur.secrets, "power")
		} else {
			cur.secrets["power"] = before
		}
		cur.touch()
	}
	op.ended = time.Now()
	op.status, op.err = "Canceled", errorf(http.StatusConflict, "OperationPreempted", "Operation execution has been preempted by a more recent operation.")
	return true
}

// powerRefused is Azure's answer to an action the machine's state does not
// allow: nothing runs on a VM still being created or deleted, and a VM that
// is off must be started, not restarted.
func powerRefused(t *resource, action string) *armError {
	name := t.id.Name()
	switch {
	case t.deleting:
		return errorf(http.StatusConflict, "OperationNotAllowed", "Operation '%s' is not allowed on VM '%s' since the VM is being deleted.", action, name)
	case t.provisioningState() == "Creating":
		return errorf(http.StatusConflict, "OperationNotAllowed", "Operation '%s' is not allowed on VM '%s' since the VM is being created.", action, name)
	case action == "restart" && switchedOff(t):
		state := powerState(t)
		if strings.HasPrefix(state, "dealloc") {
			return errorf(http.StatusConflict, "OperationNotAllowed", "Operation 'restart' is not allowed on VM '%s' since the VM is deallocated or marked to be deallocated.", name)
		}
		return errorf(http.StatusConflict, "OperationNotAllowed", "Operation 'restart' is not allowed on VM '%s' since the VM is stopped. Start the VM instead.", name)
	}
	return nil
}

func (s *Server) isDeleting(r *resource) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.deleting || s.lookup(r.idStr) != r
}

// vmMachine describes a VM or, with its scale set, an instance for the
// runtime.
func (s *Server) vmMachine(vmss, r *resource) Machine {
	if r.kind.typ == kindInstance {
		return s.instanceMachine(vmss, r)
	}
	p := r.props()
	return s.machineOf(r, str(r.body, "location"), obj(p, "storageProfile"), obj(p, "osProfile"), list(p, "networkProfile", "networkInterfaces"), r.secrets, "", "")
}
