package arm

import (
	"net/http"
	"strings"
)

// Availability sets: a group of VMs that Azure spreads over fault domains
// (racks sharing power and network) and update domains (rebooted together
// during platform maintenance). The rules are the Compute REST spec's
// (AvailabilitySet in ComputeRP/common-types and availabilitySet.json) and
// virtual-machines/availability-set-overview.md.

const kindAvSet = "Microsoft.Compute/availabilitySets"

func init() {
	register(&kindInfo{typ: kindAvSet, topLevel: true, sync: true, put: putAvailabilitySet, canDelete: availabilitySetEmpty})
}

// maxFaultDomains is each location's MaximumPlatformFaultDomainCount, the
// capability the resource SKUs API gives the availabilitySets SKU
// "Aligned" there (virtual-machines/availability-set-overview.md: "the
// number of fault domains varies by region", up to three; two-fault-domain
// regions include West Central US).
func maxFaultDomains(location string) int {
	if normalizeLocation(location) == "westcentralus" {
		return 2
	}
	return 3
}

// maxUpdateDomains is the most update domains a set may have
// (availability-set-overview.md: up to 20, 5 by default).
const maxUpdateDomains = 20

func putAvailabilitySet(s *Server, r, old *resource) *armError {
	p := r.props()
	sku := obj(r.body, "sku")
	if str(sku, "name") == "" {
		// The spec's default: a set without a SKU is "Classic", for VMs on
		// unmanaged (storage-account) disks.
		sku["name"] = "Classic"
	}
	if name, e := oneOf(sku, "name", "sku", "", "Classic", "Aligned"); e != nil {
		return e
	} else {
		sku["name"] = name
	}
	fd, e := countProperty(p, "platformFaultDomainCount", 2)
	if e != nil {
		return e
	}
	ud, e := countProperty(p, "platformUpdateDomainCount", 5)
	if e != nil {
		return e
	}
	if most := maxFaultDomains(str(r.body, "location")); fd < 1 || fd > most {
		return invalidParameter("platformFaultDomainCount", "The specified fault domain count %d must fall in the range 1 to %d.", fd, most)
	}
	if ud < 1 || ud > maxUpdateDomains {
		return invalidParameter("platformUpdateDomainCount", "The specified update domain count %d must fall in the range 1 to %d.", ud, maxUpdateDomains)
	}
	p["platformFaultDomainCount"], p["platformUpdateDomainCount"] = fd, ud
	// Membership is Azure's to record: the VMs that name the set.
	delete(p, "virtualMachines")
	if old != nil {
		members := list(old.props(), "virtualMachines")
		if len(members) > 0 {
			if str(obj(old.body, "sku"), "name") != str(sku, "name") {
				e := errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'sku.name' is not allowed while the availability set has virtual machines.")
				e.Target = "sku.name"
				return e
			}
			if int(num(old.props(), "platformFaultDomainCount")) != fd {
				e := errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'platformFaultDomainCount' is not allowed while the availability set has virtual machines.")
				e.Target = "platformFaultDomainCount"
				return e
			}
			p["virtualMachines"] = members
		}
	}
	return nil
}

// countProperty reads an integer property, def when absent.
func countProperty(p map[string]any, name string, def int) (int, *armError) {
	v, ok := p[name]
	if !ok || v == nil {
		return def, nil
	}
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) {
		return 0, invalidParameter(name, "The value of %s must be an integer.", name)
	}
	return int(f), nil
}

func num(m map[string]any, k string) float64 {
	switch v := m[k].(type) {
	case float64:
		return v
	case int:
		return float64(v)
	}
	return 0
}

// availabilitySetEmpty refuses to delete a set that still holds VMs: they
// would lose their placement (Azure keeps a VM's set for its lifetime).
func availabilitySetEmpty(_ *Server, r *resource) *armError {
	if n := len(list(r.props(), "virtualMachines")); n > 0 {
		return errorf(http.StatusConflict, "AvailabilitySetInUse", "Availability set %s cannot be deleted because it contains %d virtual machine(s). Delete the virtual machines first.", r.id.Name(), n)
	}
	return nil
}

// joinAvailabilitySet checks a VM's availabilitySet reference and, for a
// new VM, adds it to the set in the next fault and update domains
// (round-robin, as Azure spreads a set's VMs). A VM keeps its set for
// life: the reference cannot be added, changed or removed later.
func (s *Server) joinAvailabilitySet(vm, old *resource) *armError {
	ref := refID(vm.props(), "availabilitySet")
	if old != nil {
		if !strings.EqualFold(ref, refID(old.props(), "availabilitySet")) {
			e := errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'availabilitySet.id' is not allowed.")
			e.Target = "availabilitySet.id"
			return e
		}
		return nil
	}
	if ref == "" {
		return nil
	}
	if len(list(vm.body, "zones")) > 0 {
		return invalidParameter("availabilitySet", "A virtual machine cannot be placed in both an availability set and an availability zone: remove 'zones' or 'availabilitySet'.")
	}
	if e := s.requireRef(vm, ref, kindAvSet); e != nil {
		return e
	}
	set := s.lookup(ref)
	if !strings.EqualFold(set.id.ResourceGroup, vm.id.ResourceGroup) {
		return invalidParameter("availabilitySet", "The availability set %s must be in the virtual machine's resource group %s.", ref, vm.id.ResourceGroup)
	}
	managed := get(vm.props(), "storageProfile", "osDisk", "vhd") == nil
	if managed && !strings.EqualFold(str(obj(set.body, "sku"), "name"), "Aligned") {
		return errorf(http.StatusBadRequest, "OperationNotAllowed", "Addition of a VM with managed disks to non-managed Availability Set or addition of a VM with blob based disks to managed Availability Set is not supported. Please create an Availability Set with 'Aligned' SKU in order to add a VM with managed disks to it.")
	}
	return nil
}

// addToAvailabilitySet records a created VM in its set and gives it its
// domains; the caller has validated the reference.
func (s *Server) addToAvailabilitySet(vm *resource) {
	set := s.lookup(refID(vm.props(), "availabilitySet"))
	if set == nil {
		return
	}
	sp := set.props()
	members := list(sp, "virtualMachines")
	n := len(members)
	fd, ud := int(num(sp, "platformFaultDomainCount")), int(num(sp, "platformUpdateDomainCount"))
	vm.secrets["platformFaultDomain"] = n % max(fd, 1)
	vm.secrets["platformUpdateDomain"] = n % max(ud, 1)
	sp["virtualMachines"] = append(members, map[string]any{"id": strings.ToUpper(vm.idStr)})
	set.touch()
}

// leaveAvailabilitySet removes a deleted VM from its set.
func (s *Server) leaveAvailabilitySet(vm *resource) {
	set := s.lookup(refID(vm.props(), "availabilitySet"))
	if set == nil {
		return
	}
	var keep []any
	for _, m := range list(set.props(), "virtualMachines") {
		if !strings.EqualFold(str(m.(map[string]any), "id"), vm.idStr) {
			keep = append(keep, m)
		}
	}
	if len(keep) == 0 {
		delete(set.props(), "virtualMachines")
	} else {
		set.props()["virtualMachines"] = keep
	}
	set.touch()
}

// domainsOf are a VM's fault and update domains as its instance view
// shows them, for a VM in an availability set.
func domainsOf(vm *resource) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"platformFaultDomain", "platformUpdateDomain"} {
		switch v := vm.secrets[k].(type) {
		case int:
			out[k] = v
		case float64: // read back from a saved state
			out[k] = int(v)
		}
	}
	return out
}
