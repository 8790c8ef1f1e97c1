package arm

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scale sets: the model, its instances as the capacity asks, and the
// actions on instances (delete, manual upgrade).

func putVMSS(s *Server, r, old *resource) *armError {
	sku := obj(r.body, "sku")
	if _, ok := vmSizes[str(sku, "name")]; !ok {
		return invalidParameter("sku.name", "The value %s provided for the VM size is not valid.", str(sku, "name"))
	}
	capacity, _ := sku["capacity"].(float64)
	if capacity < 0 || capacity > 1000 {
		return invalidParameter("sku.capacity", "The capacity %v is outside 0 to 1000.", capacity)
	}
	sku["capacity"] = capacity
	if e := s.validateZones(r); e != nil {
		return e
	}
	if e := s.checkIdentity(r); e != nil {
		return e
	}
	p := r.props()
	if str(p, "orchestrationMode") == "" {
		p["orchestrationMode"] = "Uniform"
	}
	if str(p, "orchestrationMode") == "Uniform" {
		// Both default to true for a Uniform scale set, and Azure returns
		// them so.
		for _, f := range []string{"overprovision", "singlePlacementGroup"} {
			if _, set := p[f].(bool); !set {
				p[f] = true
			}
		}
		if p["singlePlacementGroup"] == true && capacity > maxSinglePlacementGroup {
			return invalidParameter("singlePlacementGroup", "A scale set in a single placement group holds at most %d VMs; %v were asked for: set singlePlacementGroup to false.", maxSinglePlacementGroup, capacity)
		}
	}
	if str(p, "upgradePolicy", "mode") == "" {
		obj(p, "upgradePolicy")["mode"] = "Manual"
	}
	profile := obj(p, "virtualMachineProfile")
	storage := obj(profile, "storageProfile")
	osProfile := obj(profile, "osProfile")
	// A scale set's model may change its custom data; instances take it
	// when upgraded.
	os, e := s.checkProfile(r, nil, storage, osProfile, "computerNamePrefix", 9, 58)
	if e != nil {
		return e
	}
	if e := checkOSDiskStorage(str(sku, "name"), str(storage, "osDisk", "managedDisk", "storageAccountType"), r.id.Name()); e != nil {
		return e
	}
	if e := checkGeneration(str(sku, "name"), s.imageGeneration(obj(storage, "imageReference"))); e != nil {
		return e
	}
	if e := s.checkSKUAvailable(r, str(sku, "name"), list(r.body, "zones")); e != nil {
		return e
	}
	nicConfs := list(profile, "networkProfile", "networkInterfaceConfigurations")
	if len(nicConfs) == 0 {
		return invalidParameter("networkInterfaceConfigurations", "At least one network interface configuration is required.")
	}
	for _, nc := range nicConfs {
		if e := checkAcceleratedNetworking(r, str(sku, "name"), get(nc.(map[string]any), "properties", "enableAcceleratedNetworking") == true, true); e != nil {
			return e
		}
		for _, ipc := range list(nc.(map[string]any), "properties", "ipConfigurations") {
			ip := obj(ipc.(map[string]any), "properties")
			if e := s.requireRef(r, refID(ip, "subnet"), kindSubnet); e != nil {
				return e
			}
			for _, ref := range list(ip, "loadBalancerBackendAddressPools") {
				if e := s.requireLBPart(r, str(ref.(map[string]any), "id"), "backendAddressPools"); e != nil {
					return e
				}
			}
		}
	}
	if old != nil {
		if osOf(obj(get(old.props(), "virtualMachineProfile").(map[string]any), "storageProfile")) != os {
			return errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'osType' is not allowed.")
		}
		// A scale set's names are fixed at creation, as a VM's are.
		for _, f := range []string{"computerNamePrefix", "adminUsername"} {
			if str(get(old.props(), "virtualMachineProfile").(map[string]any), "osProfile", f) != str(osProfile, f) {
				e := errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'osProfile.%s' is not allowed.", f)
				e.Target = "osProfile." + f
				return e
			}
		}
		r.secrets["nextInstance"] = old.secrets["nextInstance"]
		p["uniqueId"] = old.props()["uniqueId"]
		// A new model leaves existing instances behind until they are
		// upgraded (or replaced).
		if modelOf(old) != modelOf(r) {
			for _, inst := range s.children(r.id, "virtualMachines") {
				inst.props()["latestModelApplied"] = false
				inst.touch()
			}
		}
	} else {
		p["uniqueId"] = newUUID()
	}
	if e := s.applyIdentity(r, old); e != nil {
		return e
	}
	// The new model is stored before instances are made from it.
	s.resources[key(r.idStr)] = r
	return s.scaleTo(r, int(capacity))
}

func modelOf(r *resource) string {
	b, _ := jsonString(get(r.props(), "virtualMachineProfile"))
	cd, _ := r.secrets["customData"].(string)
	return b + "|" + cd
}

// maxSinglePlacementGroup: "When true this limits the scale set to a
// single placement group, of max size 100 virtual machines" (armcompute
// v7 models.go, VirtualMachineScaleSetProperties.SinglePlacementGroup).
const maxSinglePlacementGroup = 100

// scaleTo adds instances (new IDs) or removes the highest-numbered ones
// until the scale set has n. An over-provisioning scale set makes more
// than it adds: "With overprovisioning turned on, the scale set actually
// spins up more VMs than you asked for, then deletes the extra VMs once
// the requested number of VMs are successfully provisioned"
// (virtual-machine-scale-sets-design-overview.md). How many more Azure
// does not say; here one for every five added, at least one.
func (s *Server) scaleTo(vmss *resource, n int) *armError {
	insts := s.liveInstances(vmss)
	for len(insts) > n {
		last := insts[len(insts)-1]
		last.deleting = true
		last.touch()
		insts = insts[:len(insts)-1]
		// Removed when the scale set's operation completes.
	}
	added := 0
	for len(insts) < n {
		inst, e := s.newInstance(vmss)
		if e != nil {
			return e
		}
		insts = append(insts, inst)
		added++
	}
	if added > 0 && get(vmss.props(), "overprovision") == true {
		for range (added + 4) / 5 {
			inst, e := s.newInstance(vmss)
			if e != nil {
				return e
			}
			inst.secrets[overprovisioned] = true
		}
	}
	return nil
}

// overprovisioned marks (in an instance's secrets, which Save keeps) an
// extra instance that the scale set deletes once the others run.
const overprovisioned = "overprovisioned"

func (s *Server) liveInstances(vmss *resource) []*resource {
	var out []*resource
	for _, inst := range s.children(vmss.id, "virtualMachines") {
		if !inst.deleting && inst.secrets[overprovisioned] != true {
			out = append(out, inst)
		}
	}
	// By instance ID, numerically.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && instanceNum(out[j]) < instanceNum(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func instanceNum(r *resource) int {
	n, _ := strconv.Atoi(r.id.Name())
	return n
}

// computerNameSuffix is the six base-36 characters a scale set appends to
// its computer-name prefix.
func computerNameSuffix(n int) string {
	s := strconv.FormatInt(int64(n), 36)
	return strings.Repeat("0", 6-len(s)) + s
}

func (s *Server) newInstance(vmss *resource) (*resource, *armError) {
	next, _ := vmss.secrets["nextInstance"].(float64)
	vmss.secrets["nextInstance"] = next + 1
	vmss.touch()
	n := int(next)
	id := vmss.id.Child("virtualMachines", strconv.Itoa(n))
	profile := obj(vmss.props(), "virtualMachineProfile")
	osProfile := deepCopy(obj(profile, "osProfile"))
	osProfile["computerName"] = str(osProfile, "computerNamePrefix") + computerNameSuffix(n)
	delete(osProfile, "computerNamePrefix")
	// An instance's SKU is its size, as Azure returns it: the scale set's
	// capacity is not the instance's (and a map shared with the scale set
	// would change the instance behind its back).
	sku := map[string]any{"name": str(vmss.body, "sku", "name")}
	if tier := str(vmss.body, "sku", "tier"); tier != "" {
		sku["tier"] = tier
	}
	inst := newResource(id, kinds[strings.ToLower(kindInstance)], map[string]any{
		"location": vmss.body["location"],
		"sku":      sku,
		"properties": map[string]any{
			"latestModelApplied": true,
			"vmId":               newUUID(),
			"hardwareProfile":    map[string]any{"vmSize": str(vmss.body, "sku", "name")},
			"storageProfile":     deepCopy(obj(profile, "storageProfile")),
			"osProfile":          osProfile,
		},
	})
	// An instance made from a marketplace image sold through a plan names
	// the plan as its own (VirtualMachineScaleSetVM.plan); its
	// imageReference has no sign of it.
	if plan, ok := vmss.body["plan"].(map[string]any); ok {
		inst.body["plan"] = deepCopy(plan)
	}
	inst.body["name"] = vmss.id.Name() + "_" + strconv.Itoa(n)
	inst.body["instanceId"] = strconv.Itoa(n)
	if z := list(vmss.body, "zones"); len(z) > 0 {
		inst.body["zones"] = []any{z[n%len(z)]}
	}
	inst.setState("Creating")
	inst.etag = newETag()
	s.resources[key(inst.idStr)] = inst
	var nicRefs []any
	for _, nc := range list(profile, "networkProfile", "networkInterfaceConfigurations") {
		ncm := nc.(map[string]any)
		nicID := id.Child("networkInterfaces", str(ncm, "name"))
		nic := newResource(nicID, kinds[strings.ToLower(kindInstanceNIC)], map[string]any{
			"location":   vmss.body["location"],
			"properties": map[string]any{"ipConfigurations": deepCopy(map[string]any{"l": list(ncm, "properties", "ipConfigurations")})["l"], "virtualMachine": map[string]any{"id": inst.idStr}},
		})
		if f, ok := get(ncm, "properties", "enableIPForwarding").(bool); ok {
			nic.props()["enableIPForwarding"] = f
		}
		if e := s.fillIPConfigurations(nic, list(nic.props(), "ipConfigurations"), nil); e != nil {
			delete(s.resources, key(inst.idStr))
			return nil, e
		}
		nic.setState("Succeeded")
		nic.etag = newETag()
		s.resources[key(nicID.String())] = nic
		nicRefs = append(nicRefs, map[string]any{"id": nicID.String()})
	}
	inst.props()["networkProfile"] = map[string]any{"networkInterfaces": nicRefs}
	for k, v := range vmss.secrets {
		if k == "customData" || k == "adminPassword" {
			inst.secrets[k] = v
		}
	}
	return inst, nil
}

// vmssReady finishes the scale set's operation: instances being created are
// provisioned and booted, instances scaled in are removed. Extra instances
// of an over-provisioning scale set boot too (their custom data runs, as
// on Azure) and are deleted once the others have booted.
func vmssReady(s *Server, r *resource) ([]Machine, *armError) {
	var boot []Machine
	var extra []*resource
	defer func() {
		if len(extra) == 0 {
			return
		}
		s.after(bootDelay(s, r)+time.Second, func() {
			s.mu.Lock()
			var stop []string
			for _, inst := range extra {
				stop = append(stop, s.removeResource(inst)...)
			}
			s.mu.Unlock()
			s.stopMachines(stop)
		})
	}()
	ref, _ := obj(obj(r.props(), "virtualMachineProfile"), "storageProfile")["imageReference"].(map[string]any)
	if e := s.planMissing(r, ref); ref != nil && e != nil {
		for _, inst := range s.children(r.id, "virtualMachines") {
			if inst.provisioningState() == "Creating" {
				inst.setState("Failed")
			}
		}
		return nil, e
	}
	for _, inst := range s.children(r.id, "virtualMachines") {
		if inst.secrets[overprovisioned] == true && inst.provisioningState() == "Creating" {
			extra = append(extra, inst)
		}
		if inst.deleting {
			s.stopLater = append(s.stopLater, s.removeResource(inst)...)
			continue
		}
		if inst.provisioningState() != "Creating" {
			continue
		}
		if f := s.provisioningFailure(str(inst.body, "name"), OperationCreate); f != nil {
			inst.setState("Failed")
			continue
		}
		inst.setState("Succeeded")
		boot = append(boot, s.instanceMachine(r, inst))
	}
	return boot, nil
}

func (s *Server) instanceMachine(vmss, inst *resource) Machine {
	p := inst.props()
	return s.machineOf(inst, str(vmss.body, "location"), obj(p, "storageProfile"), obj(p, "osProfile"), list(p, "networkProfile", "networkInterfaces"), inst.secrets, vmss.id.Name(), inst.id.Name())
}

// instanceDeleting lowers the scale set's capacity as soon as an instance's
// deletion is accepted, as Azure does, so that a model update racing the
// deletion does not bring the instance back.
func instanceDeleting(s *Server, r *resource) *armError {
	parent, _ := r.id.Parent()
	if vmss := s.lookup(parent.String()); vmss != nil && !vmss.deleting && !r.deleting {
		sku := obj(vmss.body, "sku")
		if c, _ := sku["capacity"].(float64); c > 0 {
			sku["capacity"] = c - 1
			vmss.touch()
		}
	}
	return nil
}

// serveAction handles POST actions: a scale set's delete (of instances) and
// manualupgrade, and a VM's or instance's restart.
func (s *Server) serveAction(w http.ResponseWriter, r *http.Request, id resourceID, action string, body map[string]any) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	res := s.lookup(id.String())
	if res == nil {
		unlock()
		writeError(w, notFound(id))
		return
	}
	// Actions answered by a VM's or an instance's guest (runcommand.go,
	// bootdiagnostics.go).
	if onMachine := res.kind.typ == kindVM || res.kind.typ == kindInstance; onMachine && action == "runcommand" {
		unlock()
		s.serveRunCommand(w, r, id, res, body)
		return
	} else if onMachine && action == "retrievebootdiagnosticsdata" {
		unlock()
		s.serveBootDiagnostics(w, r, res)
		return
	}
	if powerActions[action] != "" && (res.kind.typ == kindVM || res.kind.typ == kindInstance || res.kind.typ == kindVMSS) {
		unlock()
		s.servePower(w, r, id, res, action, body)
		return
	}
	if res.kind.typ != kindVMSS || (action != "delete" && action != "manualupgrade") {
		unlock()
		writeError(w, errorf(http.StatusBadRequest, "OperationNotSupported", "The emulator does not support action '%s' on %s.", action, res.kind.typ))
		return
	}
	var targets []*resource
	for _, iid := range list(body, "instanceIds") {
		is, _ := iid.(string)
		inst := s.lookup(id.Child("virtualMachines", is).String())
		if inst == nil || inst.deleting {
			unlock()
			writeError(w, errorf(http.StatusBadRequest, "InvalidParameter", "The provided instanceId %s is not an active Virtual Machine Scale Set VM instanceId.", is))
			return
		}
		targets = append(targets, inst)
	}
	if len(targets) == 0 {
		unlock()
		writeError(w, invalidParameter("instanceIds", "At least one instance ID is required."))
		return
	}
	op := s.startOperation(w, r, id.Subscription, id.Namespace, str(res.body, "location"))
	var stop []string
	if action == "delete" {
		for _, t := range targets {
			_ = instanceDeleting(s, t)
			t.deleting = true
			t.touch()
		}
	} else {
		for _, t := range targets {
			if t.booted {
				stop = append(stop, t.idStr)
			}
			t.setState("Updating")
			t.booted, t.up = false, false
			delete(t.secrets, "power")
			// The instance takes the scale set's current model.
			profile := obj(res.props(), "virtualMachineProfile")
			t.props()["storageProfile"] = deepCopy(obj(profile, "storageProfile"))
			t.props()["latestModelApplied"] = true
			for k, v := range res.secrets {
				if k == "customData" || k == "adminPassword" {
					t.secrets[k] = v
				}
			}
		}
	}
	delay := s.opts.OperationDelay + bootDelay(s, res)
	s.expect(w, op, delay)
	// An upgraded instance's old guest is switched off before its new one
	// boots, however short the delay: the runtime knows a machine by its ID,
	// so a late stop would take the new guest down.
	stopped := make(chan struct{})
	s.after(delay, func() {
		<-stopped
		s.mu.Lock()
		var boot []Machine
		var stopNow []string
		for _, t := range targets {
			if action == "delete" {
				stopNow = append(stopNow, s.removeResource(t)...)
				continue
			}
			if s.lookup(t.idStr) == t && !t.deleting {
				t.setState("Succeeded")
				boot = append(boot, s.instanceMachine(res, t))
			}
		}
		s.finishOperation(op, nil)
		s.mu.Unlock()
		s.stopMachines(stopNow)
		s.bootMachines(boot)
	})
	unlock()
	s.stopMachines(stop)
	close(stopped)
	w.WriteHeader(http.StatusAccepted)
}
