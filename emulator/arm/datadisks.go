package arm

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Managed data disks of a VM, as the Compute RP handles
// storageProfile.dataDisks for the Azure Disk CSI driver: an entry with
// createOption Attach attaches an existing disk, one with Empty creates
// the disk, and an entry removed from the list, or sent with toBeDetached,
// detaches its disk (MicrosoftDocs/azure-docs
// articles/virtual-machines/troubleshooting/troubleshoot-vm-deployment-detached.md).
// The driver (kubernetes-sigs/azuredisk-csi-driver d983d613, through its
// vendored cloud-provider-azure pkg/provider/azure_controller_standard.go)
// sends a PUT holding only the location and the whole dataDisks list, so a
// PUT of an existing VM keeps what it leaves out (keepUnsent).
// FromImage data disks (disks of a managed image) are refused: the
// emulator's images carry no data disks.
//
// Azure's texts below come from Microsoft's list of Compute errors
// (MicrosoftDocs/azure-docs articles/virtual-machines/troubleshooting/error-messages.md
// at 36417f01) and from answers quoted in public issues, each named where
// it is used. Texts marked "the emulator's own" have no public source.

// maxLUN is the highest LUN a data disk takes ("Value '64' must be between
// '0' and '63' inclusive", microsoft/lisa #692).
const maxLUN = 63

// keepUnsent fills what a PUT of an existing VM leaves out with what the
// VM has: the Compute RP treats an absent property as unchanged, which is
// what lets cloud-provider-azure PUT a VM with only its location and data
// disks (an empty list detaches them all; an absent one keeps them), and
// PUT an empty VM to refresh it (availabilitySet.UpdateVM).
func keepUnsent(old, vm *resource) {
	for _, k := range []string{"location", "tags", "zones", "identity", "plan"} {
		if _, sent := vm.body[k]; !sent && old.body[k] != nil {
			vm.body[k] = copyValue(old.body[k])
		}
	}
	fillAbsent(vm.props(), old.props())
}

func fillAbsent(dst, src map[string]any) {
	for k, v := range src {
		have, sent := dst[k]
		switch {
		case !sent || have == nil:
			dst[k] = copyValue(v)
		default:
			hm, ok1 := have.(map[string]any)
			sm, ok2 := v.(map[string]any)
			if ok1 && ok2 {
				fillAbsent(hm, sm)
			}
		}
	}
}

// planDataDisks checks a VM's data disks against what it had and returns
// the change to make once the whole PUT is valid.
func (s *Server) planDataDisks(vm, old *resource, size string) (func(), *armError) {
	before := map[int]map[string]any{}
	if old != nil {
		for _, d := range list(old.props(), "storageProfile", "dataDisks") {
			if dm, ok := d.(map[string]any); ok && dm["toBeDetached"] != true {
				before[int(num(dm, "lun"))] = dm
			}
		}
	}
	// First what the list says on its own: LUNs, then how many disks.
	seen := map[int]bool{}
	var active []map[string]any
	for _, d := range list(vm.props(), "storageProfile", "dataDisks") {
		dm, ok := d.(map[string]any)
		if !ok {
			// The list's generic wording (error-messages.md).
			return nil, invalidParameter("dataDisks", "The value of parameter dataDisks is invalid.")
		}
		l, ok := dm["lun"].(float64)
		if !ok {
			// The Compute RP's wording for a missing parameter (as for
			// adminUsername, osprofile.go).
			return nil, invalidParameter("dataDisk.lun", "Required parameter 'dataDisk.lun' is missing (null).")
		}
		if l != float64(int(l)) || l < 0 || l > maxLUN {
			// 400 InvalidParameter, as microsoft/lisa #692 quotes it.
			return nil, invalidParameter("dataDisk.lun", "The value '%v' of parameter 'dataDisk.lun' is out of range. Value '%v' must be between '0' and '%d' inclusive.", l, l, maxLUN)
		}
		if seen[int(l)] {
			// error-messages.md.
			return nil, invalidParameter("dataDisk.lun", "A disk at LUN %d already exists.", int(l))
		}
		seen[int(l)] = true
		if dm["toBeDetached"] != true {
			active = append(active, dm)
		}
	}
	if max := vmSizes[size].maxDataDisks; len(active) > max {
		// error-messages.md; 409, as hashicorp/terraform-provider-azurerm's
		// data disk attachment resource notes ("we get a 409 back").
		return nil, errorf(http.StatusConflict, "OperationNotAllowed", "The maximum number of data disks allowed to be attached to a VM of this size is %d.", max)
	}
	// Then each disk.
	type attachment struct {
		entry map[string]any
		disk  *resource // nil: an Empty disk to create
	}
	var attach []attachment
	kept := map[string]bool{}
	for _, dm := range active {
		lun := int(num(dm, "lun"))
		id := str(dm, "managedDisk", "id")
		option := str(dm, "createOption")
		if prev := before[lun]; prev != nil {
			// The LUN holds a disk already: the entry is that disk, as a
			// GET returned it (an Empty one included).
			prevID := str(prev, "managedDisk", "id")
			if id != "" && !strings.EqualFold(id, prevID) {
				// 409, as Azure/azure-sdk-for-java #2925 and
				// hashicorp/terraform-provider-azurerm #592 quote it.
				e := errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'dataDisk.managedDisk.id' is not allowed.")
				e.Target = "dataDisk.managedDisk.id"
				return nil, e
			}
			if disk := s.lookup(prevID); disk != nil {
				attach = append(attach, attachment{dm, disk})
				kept[key(disk.idStr)] = true
			}
			continue
		}
		switch {
		case strings.EqualFold(option, "Attach"):
			disk := s.lookup(id)
			if id == "" || disk == nil || disk.deleting || disk.kind.typ != kindDisk || !sameLocation(str(disk.body, "location"), str(vm.body, "location")) {
				// What cloud-provider-azure looks for is the 404: it then
				// drops the disks that no longer exist and tries again
				// (errutils.CheckResourceExistsFromAzcoreError,
				// FilterNonExistingDisks). The text is the emulator's own.
				return nil, errorf(http.StatusNotFound, "NotFound", "Disk '%s' referenced by data disk at LUN %d of VM '%s' was not found in location '%s'.", id, lun, vm.id.Name(), normalizeLocation(str(vm.body, "location")))
			}
			if by := str(disk.body, "managedBy"); by != "" && !strings.EqualFold(by, vm.idStr) && s.lookup(by) != nil {
				// As kubernetes-sigs/azuredisk-csi-driver #1378 (2022) quotes
				// it; error-messages.md lists an older wording ("cannot be
				// attached as the disk is already owned by VM"). 409 is the
				// emulator's choice: no quote gives the status.
				e := errorf(http.StatusConflict, "ConflictingUserInput", "Cannot attach the disk %s to VM %s because it is already attached to VM %s. A disk can be attached to only one VM at a time.", disk.id.Name(), vm.idStr, by)
				e.Target = disk.idStr
				return nil, e
			}
			if e := diskFitsVM(vm, disk); e != nil {
				return nil, e
			}
			attach = append(attach, attachment{dm, disk})
		case strings.EqualFold(option, "Empty"):
			if id != "" {
				// As kubernetes-sigs/azuredisk-csi-driver #254 quotes it.
				return nil, errorf(http.StatusBadRequest, "InvalidParameterConflictingProperties", "The property 'dataDisk.createOption' cannot have the value 'Empty' when property 'dataDisk.managedDisk.id' is set.")
			}
			if num(dm, "diskSizeGB") <= 0 {
				// The missing-parameter wording again.
				return nil, invalidParameter("dataDisk.diskSizeGB", "Required parameter 'dataDisk.diskSizeGB' is missing (null).")
			}
			if str(dm, "name") == "" {
				// The emulator's own name for a disk the request leaves
				// unnamed.
				dm["name"] = fmt.Sprintf("%s_DataDisk_%d_%s", vm.id.Name(), lun, strings.ReplaceAll(newUUID(), "-", ""))
			}
			if s.lookup(diskIDIn(vm, str(dm, "name")).String()) != nil {
				// error-messages.md.
				return nil, invalidParameter("dataDisk.name", "A disk named '%s' already exists.", str(dm, "name"))
			}
			attach = append(attach, attachment{dm, nil})
		default:
			// The emulator's own text: its images have no data disks to
			// copy (FromImage), and Copy/Restore are not modelled.
			return nil, invalidParameter("dataDisk.createOption", "The emulator attaches data disks with createOption Attach or Empty, not '%s'.", option)
		}
	}
	return func() {
		// Detach first: a disk moved to another LUN is attached again.
		for _, prev := range before {
			if id := str(prev, "managedDisk", "id"); !kept[key(id)] {
				s.detachDisk(id, vm.idStr)
			}
		}
		for _, a := range attach {
			disk := a.disk
			if disk == nil {
				disk = s.createDataDisk(vm, a.entry, size)
			}
			if !kept[key(disk.idStr)] {
				// What an injected AttachDataDisk failure fails (vmReady).
				vm.secrets[secretAttaching] = "true"
			}
			s.attachDisk(disk, vm.idStr)
			completeDataDisk(a.entry, disk)
		}
	}, nil
}

// diskFitsVM refuses a disk in another zone than the VM's. Zone-redundant
// disks fit every zone. The texts are Azure's 400 BadRequest answers as
// jenkins-infra/azure #1406 (a zonal disk of another zone),
// jrudlin/Azure #7 (a regional disk on a zonal VM) and
// hashicorp/terraform-provider-azurerm #11992 (a zonal disk on a VM of an
// availability set) quote them.
func diskFitsVM(vm, disk *resource) *armError {
	diskZones, vmZones := list(disk.body, "zones"), list(vm.body, "zones")
	if len(diskZones) > 0 && refID(vm.props(), "availabilitySet") != "" {
		return errorf(http.StatusBadRequest, "BadRequest", "Zonal Disk '%s' cannot be attached to resource '%s' because the resource belongs to an Availability Set and this feature is not supported.", disk.idStr, vm.id.Name())
	}
	if len(vmZones) == 0 || strings.HasSuffix(str(disk.body, "sku", "name"), "_ZRS") {
		return nil
	}
	vz, _ := vmZones[0].(string)
	if len(diskZones) == 0 {
		return errorf(http.StatusBadRequest, "BadRequest", "Disk %s cannot be attached to the VM because it is not in zone '%s'.", disk.idStr, vz)
	}
	if dz, _ := diskZones[0].(string); dz != vz {
		return errorf(http.StatusBadRequest, "BadRequest", "Disk %s cannot be attached to the VM because it is not in the same zone as the VM. VM zone: '%s'. Disk zone: '%s'.", disk.idStr, vz, dz)
	}
	return nil
}

// completeDataDisk writes an entry as Azure returns it.
func completeDataDisk(entry map[string]any, disk *resource) {
	entry["name"] = disk.id.Name()
	md := obj(entry, "managedDisk")
	md["id"] = disk.idStr
	md["storageAccountType"] = str(disk.body, "sku", "name")
	if str(entry, "caching") == "" {
		entry["caching"] = "None"
	}
	if str(entry, "deleteOption") == "" {
		entry["deleteOption"] = "Detach"
	}
	entry["diskSizeGB"] = disk.props()["diskSizeGB"]
	entry["toBeDetached"] = false
}

func diskIDIn(vm *resource, name string) resourceID {
	return resourceID{Subscription: vm.id.Subscription, ResourceGroup: vm.id.ResourceGroup, Namespace: "Microsoft.Compute", Types: []string{"disks"}, Names: []string{name}}
}

// createDataDisk makes the disk of an Empty entry, in the VM's location
// and zone. Its storage type is the entry's, or (the emulator's choice)
// Premium SSD where the size takes it and Standard HDD elsewhere.
func (s *Server) createDataDisk(vm *resource, entry map[string]any, size string) *resource {
	sku := str(entry, "managedDisk", "storageAccountType")
	if sku == "" {
		sku = "Standard_LRS"
		if vmSizes[size].premiumIO {
			sku = "Premium_LRS"
		}
	}
	return s.newDisk(vm, str(entry, "name"), sku, map[string]any{
		"diskSizeGB": entry["diskSizeGB"], "creationData": map[string]any{"createOption": "Empty"},
	})
}

// newDisk stores a disk that a VM's PUT creates, attached to it, with
// what the Disk RP gives every disk: a uniqueId GUID and its creation time.
func (s *Server) newDisk(vm *resource, name, sku string, props map[string]any) *resource {
	props["provisioningState"] = "Succeeded"
	props["diskState"] = "Attached"
	props["uniqueId"] = newUUID()
	props["timeCreated"] = s.now().UTC().Format(time.RFC3339Nano)
	disk := newResource(diskIDIn(vm, name), kinds[strings.ToLower(kindDisk)], map[string]any{
		"location": vm.body["location"], "sku": map[string]any{"name": sku}, "properties": props,
	})
	if z, ok := vm.body["zones"]; ok {
		disk.body["zones"] = copyValue(z)
	}
	disk.body["managedBy"] = vm.idStr
	disk.etag = newETag()
	s.resources[key(disk.idStr)] = disk
	return disk
}

func (s *Server) attachDisk(disk *resource, vmID string) {
	if str(disk.body, "managedBy") == vmID && str(disk.props(), "diskState") == "Attached" {
		return
	}
	disk.body["managedBy"] = vmID
	disk.props()["diskState"] = "Attached"
	disk.etag = newETag()
	disk.touch()
}

// detachDisk releases a disk the VM holds; a disk another VM took since is
// left alone.
func (s *Server) detachDisk(id, vmID string) {
	disk := s.lookup(id)
	if disk == nil || !strings.EqualFold(str(disk.body, "managedBy"), vmID) {
		return
	}
	delete(disk.body, "managedBy")
	disk.props()["diskState"] = "Unattached"
	disk.etag = newETag()
	disk.touch()
}

// dropDetached removes the entries sent with toBeDetached once the
// operation that detached them completes, as Azure's model then no longer
// lists them.
func dropDetached(vm *resource) {
	storage := obj(vm.props(), "storageProfile")
	disks := list(storage, "dataDisks")
	var keep []any
	for _, d := range disks {
		if dm, ok := d.(map[string]any); ok && dm["toBeDetached"] == true {
			continue
		}
		keep = append(keep, d)
	}
	if len(keep) != len(disks) {
		if keep == nil {
			keep = []any{}
		}
		storage["dataDisks"] = keep
		vm.touch()
	}
}

// dataDisksDeleted detaches a deleted VM's data disks, or deletes those
// whose deleteOption is Delete, as vmDeleted does for the OS disk.
func (s *Server) dataDisksDeleted(vm *resource) {
	for _, d := range list(vm.props(), "storageProfile", "dataDisks") {
		dm, ok := d.(map[string]any)
		if !ok {
			continue
		}
		disk := s.lookup(str(dm, "managedDisk", "id"))
		if disk == nil || !strings.EqualFold(str(disk.body, "managedBy"), vm.idStr) {
			continue
		}
		if strings.EqualFold(str(dm, "deleteOption"), "Delete") {
			delete(s.resources, key(disk.idStr))
			continue
		}
		s.detachDisk(disk.idStr, vm.idStr)
	}
}

// dataDisksOf reads a VM's attached data disks for the machine runtime.
func (s *Server) dataDisksOf(id string) []DataDisk {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm := s.lookup(id)
	if vm == nil || vm.kind.typ != kindVM {
		return nil
	}
	var out []DataDisk
	for _, d := range list(vm.props(), "storageProfile", "dataDisks") {
		dm, ok := d.(map[string]any)
		if !ok || dm["toBeDetached"] == true {
			continue
		}
		dd := DataDisk{LUN: int(num(dm, "lun")), Name: str(dm, "name"), ID: str(dm, "managedDisk", "id"), Caching: str(dm, "caching"), SizeGB: int(num(dm, "diskSizeGB"))}
		if disk := s.lookup(dd.ID); disk != nil {
			dd.UniqueID = str(disk.props(), "uniqueId")
			dd.SizeGB = int(num(disk.props(), "diskSizeGB"))
		}
		out = append(out, dd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LUN < out[j].LUN })
	return out
}

// putDisk gives a new disk what the Disk RP gives every disk (uniqueId,
// timeCreated, diskState Unattached) and keeps them, and the read-only
// managedBy, when the disk is written again.
func putDisk(s *Server, r, old *resource) *armError {
	p := r.props()
	p["uniqueId"], p["timeCreated"], p["diskState"] = newUUID(), s.now().UTC().Format(time.RFC3339Nano), "Unattached"
	if old == nil {
		return nil
	}
	for _, k := range []string{"uniqueId", "timeCreated", "diskState"} {
		if v, ok := old.props()[k]; ok && v != nil {
			p[k] = v
		}
	}
	if by, ok := old.body["managedBy"]; ok {
		r.body["managedBy"] = by
	} else {
		delete(r.body, "managedBy")
	}
	return nil
}
