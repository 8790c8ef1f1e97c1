package arm_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/emulator/arm"
)

// zonalVM creates a Linux VM of a size in a zone of the test location.
func (w *world) zonalVM(rg, name, size, zone, subnetID string) armcompute.VirtualMachine {
	nic := w.nic(rg, name+"-nic", subnetID)
	v := linuxVM(*nic.ID, "#cloud-config")
	v.Properties.HardwareProfile.VMSize = to.Ptr(armcompute.VirtualMachineSizeTypes(size))
	v.Zones = []*string{to.Ptr(zone)}
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	return done(vms.BeginCreateOrUpdate(w.ctx, rg, name, v, nil)).VirtualMachine
}

// emptyDisk creates a disk as azuredisk-csi-driver's CreateVolume does:
// createOption Empty, a size, a SKU, the node's zone and its tags.
func (w *world) emptyDisk(rg, name, sku string, sizeGB int32, zones ...string) armcompute.Disk {
	d := armcompute.Disk{
		Location: to.Ptr(location),
		SKU:      &armcompute.DiskSKU{Name: to.Ptr(armcompute.DiskStorageAccountTypes(sku))},
		Tags:     map[string]*string{"k8s-azure-created-by": to.Ptr("kubernetes-azure-dd")},
		Properties: &armcompute.DiskProperties{
			CreationData: &armcompute.CreationData{CreateOption: to.Ptr(armcompute.DiskCreateOptionEmpty)},
			DiskSizeGB:   to.Ptr(sizeGB),
		},
	}
	for _, z := range zones {
		d.Zones = append(d.Zones, to.Ptr(z))
	}
	disks := must(w.compute.NewDisksClient(), nil)
	return done(disks.BeginCreateOrUpdate(w.ctx, rg, name, d, nil)).Disk
}

// putDataDisks writes a VM's data disks as cloud-provider-azure's
// availabilitySet.AttachDisk and DetachDisk do: a PUT of the VM holding its
// location and the whole list, nothing else.
func (w *world) putDataDisks(rg, name string, disks []*armcompute.DataDisk) (armcompute.VirtualMachine, error) {
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	p, err := vms.BeginCreateOrUpdate(w.ctx, rg, name, armcompute.VirtualMachine{
		Location:   to.Ptr(location),
		Properties: &armcompute.VirtualMachineProperties{StorageProfile: &armcompute.StorageProfile{DataDisks: disks}},
	}, nil)
	if err != nil {
		return armcompute.VirtualMachine{}, err
	}
	res, err := p.PollUntilDone(w.ctx, nil)
	return res.VirtualMachine, err
}

func attachEntry(lun int32, d armcompute.Disk) *armcompute.DataDisk {
	return &armcompute.DataDisk{
		Lun: to.Ptr(lun), Name: d.Name, CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesAttach),
		Caching: to.Ptr(armcompute.CachingTypesReadOnly), ManagedDisk: &armcompute.ManagedDiskParameters{ID: d.ID},
	}
}

func dataDisksOf(t *testing.T, rt *arm.RecordingRuntime, vmID string) []arm.DataDisk {
	t.Helper()
	for _, m := range rt.Running() {
		if strings.EqualFold(m.ID, vmID) {
			if m.DataDisks == nil {
				t.Fatal("the machine has no DataDisks func")
			}
			return m.DataDisks()
		}
	}
	t.Fatalf("machine %s is not running", vmID)
	return nil
}

// A disk made as the CSI driver makes one is attached and detached by
// updates of the VM (a PUT of its data disks, a PATCH, toBeDetached,
// removal), the disk says who holds it, and the machine runtime sees the
// disks the VM has now.
func TestDataDisksAttachAndDetachThroughVMUpdates(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")
	vm := w.zonalVM("rg", "node-0", "Standard_D2s_v3", "1", subnet)
	waitRunning(t, w.rt, 1)
	if got := dataDisksOf(t, w.rt, *vm.ID); len(got) != 0 {
		t.Fatalf("a new VM has data disks %+v", got)
	}
	disks := must(w.compute.NewDisksClient(), nil)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)

	pvc := w.emptyDisk("rg", "pvc-1", "Premium_LRS", 10, "1")
	if pvc.Properties.UniqueID == nil || len(*pvc.Properties.UniqueID) != 36 || pvc.Properties.TimeCreated == nil ||
		*pvc.Properties.DiskState != armcompute.DiskStateUnattached || pvc.ManagedBy != nil {
		t.Fatalf("a new disk: %+v", pvc.Properties)
	}

	// Attach with the sparse PUT: the rest of the VM stays as it was.
	got, err := w.putDataDisks("rg", "node-0", []*armcompute.DataDisk{attachEntry(0, pvc)})
	if err != nil {
		t.Fatal(err)
	}
	if *got.Properties.HardwareProfile.VMSize != "Standard_D2s_v3" || len(got.Zones) != 1 || *got.Zones[0] != "1" ||
		got.Properties.StorageProfile.ImageReference == nil || len(got.Properties.NetworkProfile.NetworkInterfaces) != 1 {
		t.Fatalf("the data disks' PUT changed the rest of the VM: %+v", got.Properties)
	}
	dd := got.Properties.StorageProfile.DataDisks
	if len(dd) != 1 || *dd[0].ManagedDisk.StorageAccountType != armcompute.StorageAccountTypesPremiumLRS || *dd[0].DiskSizeGB != 10 ||
		*dd[0].ToBeDetached || *dd[0].DeleteOption != armcompute.DiskDeleteOptionTypesDetach || *dd[0].Caching != armcompute.CachingTypesReadOnly {
		t.Fatalf("attached entry %+v", dd)
	}
	pvc = must(disks.Get(w.ctx, "rg", "pvc-1", nil)).Disk
	if pvc.ManagedBy == nil || *pvc.ManagedBy != *vm.ID || *pvc.Properties.DiskState != armcompute.DiskStateAttached {
		t.Fatalf("attached disk: managedBy %v, state %s", pvc.ManagedBy, *pvc.Properties.DiskState)
	}
	// An empty PUT (cloud-provider-azure's UpdateVM) changes nothing.
	if got = done(vms.BeginCreateOrUpdate(w.ctx, "rg", "node-0", armcompute.VirtualMachine{}, nil)).VirtualMachine; len(got.Properties.StorageProfile.DataDisks) != 1 || *got.Location != location {
		t.Fatalf("after an empty PUT: %+v", got.Properties.StorageProfile)
	}
	want := arm.DataDisk{LUN: 0, Name: "pvc-1", ID: *pvc.ID, UniqueID: *pvc.Properties.UniqueID, SizeGB: 10, Caching: "ReadOnly"}
	if seen := dataDisksOf(t, w.rt, *vm.ID); len(seen) != 1 || seen[0] != want {
		t.Fatalf("the runtime sees %+v, want %+v", seen, want)
	}

	// A PATCH with the whole list adds an Empty disk, made in the VM's
	// zone; caching defaults to None.
	cur := must(vms.Get(w.ctx, "rg", "node-0", nil)).VirtualMachine
	list := append(cur.Properties.StorageProfile.DataDisks, &armcompute.DataDisk{
		Lun: to.Ptr[int32](1), Name: to.Ptr("scratch"), CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesEmpty), DiskSizeGB: to.Ptr[int32](20),
	})
	got = done(vms.BeginUpdate(w.ctx, "rg", "node-0", armcompute.VirtualMachineUpdate{
		Properties: &armcompute.VirtualMachineProperties{StorageProfile: &armcompute.StorageProfile{DataDisks: list}},
	}, nil)).VirtualMachine
	if dd := got.Properties.StorageProfile.DataDisks; len(dd) != 2 || *dd[1].Caching != armcompute.CachingTypesNone || dd[1].ManagedDisk == nil || dd[1].ManagedDisk.ID == nil {
		t.Fatalf("after the PATCH: %+v", dd)
	}
	scratch := must(disks.Get(w.ctx, "rg", "scratch", nil)).Disk
	if *scratch.ManagedBy != *vm.ID || *scratch.Properties.DiskSizeGB != 20 || scratch.Properties.UniqueID == nil || scratch.Properties.TimeCreated == nil ||
		len(scratch.Zones) != 1 || *scratch.Zones[0] != "1" || *scratch.Properties.CreationData.CreateOption != armcompute.DiskCreateOptionEmpty {
		t.Fatalf("the Empty data disk: %+v zones %v", scratch.Properties, scratch.Zones)
	}
	if seen := dataDisksOf(t, w.rt, *vm.ID); len(seen) != 2 || seen[1].Name != "scratch" || seen[1].UniqueID != *scratch.Properties.UniqueID {
		t.Fatalf("the runtime sees %+v", seen)
	}

	// Detach as the CSI driver does: toBeDetached on the entry. Once the
	// operation is done the entry is gone from the model.
	cur = must(vms.Get(w.ctx, "rg", "node-0", nil)).VirtualMachine
	cur.Properties.StorageProfile.DataDisks[0].ToBeDetached = to.Ptr(true)
	got, err = w.putDataDisks("rg", "node-0", cur.Properties.StorageProfile.DataDisks)
	if err != nil {
		t.Fatal(err)
	}
	if dd := got.Properties.StorageProfile.DataDisks; len(dd) != 1 || *dd[0].Name != "scratch" {
		t.Fatalf("after toBeDetached the model lists %+v", dd)
	}
	pvc = must(disks.Get(w.ctx, "rg", "pvc-1", nil)).Disk
	if pvc.ManagedBy != nil || *pvc.Properties.DiskState != armcompute.DiskStateUnattached {
		t.Fatalf("detached disk: managedBy %v, state %s", pvc.ManagedBy, *pvc.Properties.DiskState)
	}
	if seen := dataDisksOf(t, w.rt, *vm.ID); len(seen) != 1 || seen[0].Name != "scratch" {
		t.Fatalf("the runtime sees %+v", seen)
	}

	// Detach by removal from the list.
	if _, err := w.putDataDisks("rg", "node-0", []*armcompute.DataDisk{}); err != nil {
		t.Fatal(err)
	}
	if scratch = must(disks.Get(w.ctx, "rg", "scratch", nil)).Disk; scratch.ManagedBy != nil || *scratch.Properties.DiskState != armcompute.DiskStateUnattached {
		t.Fatalf("removed disk: managedBy %v, state %s", scratch.ManagedBy, *scratch.Properties.DiskState)
	}
	if seen := dataDisksOf(t, w.rt, *vm.ID); len(seen) != 0 {
		t.Fatalf("the runtime sees %+v", seen)
	}

	// Deleting the VM detaches its data disks, and deletes those whose
	// deleteOption is Delete.
	keep := attachEntry(0, pvc)
	gone := attachEntry(1, scratch)
	gone.DeleteOption = to.Ptr(armcompute.DiskDeleteOptionTypesDelete)
	if _, err := w.putDataDisks("rg", "node-0", []*armcompute.DataDisk{keep, gone}); err != nil {
		t.Fatal(err)
	}
	done(vms.BeginDelete(w.ctx, "rg", "node-0", nil))
	if pvc = must(disks.Get(w.ctx, "rg", "pvc-1", nil)).Disk; pvc.ManagedBy != nil || *pvc.Properties.DiskState != armcompute.DiskStateUnattached {
		t.Fatalf("data disk of a deleted VM: managedBy %v, state %s", pvc.ManagedBy, *pvc.Properties.DiskState)
	}
	if _, err := disks.Get(w.ctx, "rg", "scratch", nil); err == nil {
		t.Fatal("a data disk with deleteOption Delete outlived its VM")
	}
}

// What Azure refuses when a VM's data disks change, with its status codes
// and error codes.
func TestDataDiskRefusals(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")
	small := w.zonalVM("rg", "small", "Standard_B1s", "1", subnet) // MaxDataDiskCount 2
	w.zonalVM("rg", "big", "Standard_D2s_v3", "1", subnet)
	d0 := w.emptyDisk("rg", "d0", "Premium_LRS", 4, "1")
	d1 := w.emptyDisk("rg", "d1", "Premium_LRS", 4, "1")
	d2 := w.emptyDisk("rg", "d2", "Premium_LRS", 4, "1")
	zone2 := w.emptyDisk("rg", "zone2", "Premium_LRS", 4, "2")
	regional := w.emptyDisk("rg", "regional", "Premium_LRS", 4)
	zrs := w.emptyDisk("rg", "zrs", "Premium_ZRS", 4)
	disks := must(w.compute.NewDisksClient(), nil)

	refused := func(name string, status int, code, text string, list ...*armcompute.DataDisk) {
		t.Helper()
		_, err := w.putDataDisks("rg", name, list)
		re := azureCode(t, err, code)
		if re.StatusCode != status || !strings.Contains(err.Error(), text) {
			t.Fatalf("status %d, want %d, or the message lacks %q: %v", re.StatusCode, status, text, err)
		}
	}
	refused("small", http.StatusConflict, "OperationNotAllowed", "The maximum number of data disks allowed to be attached to a VM of this size is 2.",
		attachEntry(0, d0), attachEntry(1, d1), attachEntry(2, d2))
	refused("small", http.StatusBadRequest, "InvalidParameter", "A disk at LUN 0 already exists.", attachEntry(0, d0), attachEntry(0, d1))
	refused("small", http.StatusBadRequest, "InvalidParameter", "Value '64' must be between '0' and '63' inclusive.", attachEntry(64, d0))
	refused("small", http.StatusBadRequest, "BadRequest", "VM zone: '1'. Disk zone: '2'.", attachEntry(0, zone2))
	refused("small", http.StatusBadRequest, "BadRequest", "because it is not in zone '1'.", attachEntry(0, regional))
	missing := attachEntry(0, d0)
	missing.ManagedDisk.ID = to.Ptr(strings.Replace(*d0.ID, "/d0", "/nothing", 1))
	refused("small", http.StatusNotFound, "NotFound", "was not found", missing)

	// A zone-redundant disk fits every zone.
	if _, err := w.putDataDisks("rg", "small", []*armcompute.DataDisk{attachEntry(0, zrs)}); err != nil {
		t.Fatal(err)
	}
	// Another disk at a LUN in use changes the entry, which Azure refuses.
	refused("small", http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'dataDisk.managedDisk.id' is not allowed.", attachEntry(0, d0))

	// A disk one VM holds cannot be attached to another, nor deleted.
	if _, err := w.putDataDisks("rg", "big", []*armcompute.DataDisk{attachEntry(0, d0)}); err != nil {
		t.Fatal(err)
	}
	refused("small", http.StatusConflict, "ConflictingUserInput", "because it is already attached to VM", attachEntry(0, zrs), attachEntry(1, d0))
	err := pollErr(disks.BeginDelete(w.ctx, "rg", "d0", nil))
	if re := azureCode(t, err, "OperationNotAllowed"); re.StatusCode != http.StatusConflict || !strings.Contains(err.Error(), "Disk d0 is attached to VM "+strings.Replace(*small.ID, "/small", "/big", 1)) {
		t.Fatalf("deleting an attached disk: %v", err)
	}

	// The refusals changed nothing: small holds the ZRS disk alone.
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	vm := must(vms.Get(w.ctx, "rg", "small", nil)).VirtualMachine
	if dd := vm.Properties.StorageProfile.DataDisks; len(dd) != 1 || *dd[0].Name != "zrs" {
		t.Fatalf("small's data disks after the refusals: %+v", dd)
	}
	for _, name := range []string{"d1", "d2", "zone2", "regional"} {
		if d := must(disks.Get(w.ctx, "rg", name, nil)).Disk; d.ManagedBy != nil {
			t.Fatalf("disk %s is held by %s after a refused attach", name, *d.ManagedBy)
		}
	}

	// Resource SKUs give each size's MaxDataDiskCount.
	skus := must(w.compute.NewResourceSKUsClient(), nil).NewListPager(nil)
	found := false
	for skus.More() {
		for _, s := range must(skus.NextPage(w.ctx)).Value {
			if *s.Name != "Standard_B1s" {
				continue
			}
			for _, c := range s.Capabilities {
				if *c.Name == "MaxDataDiskCount" && *c.Value == "2" {
					found = true
				}
			}
		}
	}
	if !found {
		t.Fatal("resource SKUs give Standard_B1s no MaxDataDiskCount of 2")
	}
}

// A VM's state is its last operation's outcome: an injected AllocationFailed
// fails the creation once (the instance view names it, nothing boots) and
// the next PUT makes the VM; a data-disk attach that fails in its
// operation leaves a running VM Failed with the disk kept in its model, and
// the next successful operation returns it to Succeeded.
func TestVMFailedStateIsTheLastOperations(t *testing.T) {
	w := newWorld(t, func(o *arm.Options) {
		o.ProvisioningFailures = []arm.ProvisioningFailure{
			{NameContains: "alloc", Code: "AllocationFailed", Operation: arm.OperationCreate, Times: 1},
			{NameContains: "disky", Code: "AttachDiskWhileBeingDetached", Message: "Cannot attach data disk 'd0' to VM 'disky' because the disk is currently being detached or the last detach operation failed.", Operation: arm.OperationAttachDataDisk, Times: 1},
		}
	})
	w.group("rg")
	subnet := w.network("rg")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	state := func(name string) string {
		t.Helper()
		return *must(vms.Get(w.ctx, "rg", name, nil)).Properties.ProvisioningState
	}
	failedStatus := func(name string) *armcompute.InstanceViewStatus {
		t.Helper()
		for _, s := range must(vms.InstanceView(w.ctx, "rg", name, nil)).Statuses {
			if strings.HasPrefix(*s.Code, "ProvisioningState/failed") {
				return s
			}
		}
		return nil
	}

	nic := w.nic("rg", "alloc-nic", subnet)
	body := linuxVM(*nic.ID, "#cloud-config")
	err := pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "alloc", body, nil))
	azureCode(t, err, "AllocationFailed")
	if s := state("alloc"); s != "Failed" {
		t.Fatalf("state %s after AllocationFailed, want Failed", s)
	}
	if st := failedStatus("alloc"); st == nil || *st.Code != "ProvisioningState/failed/AllocationFailed" || !strings.Contains(*st.Message, "sufficient capacity") || st.Time == nil {
		t.Fatalf("the instance view does not name the failure: %+v", st)
	}
	if len(w.rt.Running()) != 0 {
		t.Fatal("a VM whose allocation failed was booted")
	}
	// The retry: the same model, the secrets left out (Azure keeps them).
	body.Properties.OSProfile.CustomData = nil
	if err := pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "alloc", body, nil)); err != nil {
		t.Fatalf("the retry after AllocationFailed: %v", err)
	}
	if s := state("alloc"); s != "Succeeded" || failedStatus("alloc") != nil {
		t.Fatalf("state %s after the retry, want Succeeded and no failed status", s)
	}
	if len(w.rt.Running()) != 1 {
		t.Fatal("the VM made by the retry was not booted")
	}

	w.zonalVM("rg", "disky", "Standard_D2s_v3", "1", subnet)
	d0 := w.emptyDisk("rg", "d0", "Premium_LRS", 4, "1")
	_, err = w.putDataDisks("rg", "disky", []*armcompute.DataDisk{attachEntry(0, d0)})
	azureCode(t, err, "AttachDiskWhileBeingDetached")
	if s := state("disky"); s != "Failed" {
		t.Fatalf("state %s after a failed attach, want Failed", s)
	}
	if st := failedStatus("disky"); st == nil || *st.Code != "ProvisioningState/failed/AttachDiskWhileBeingDetached" {
		t.Fatalf("the instance view does not name the failed attach: %+v", st)
	}
	vm := must(vms.Get(w.ctx, "rg", "disky", nil)).VirtualMachine
	if dd := vm.Properties.StorageProfile.DataDisks; len(dd) != 1 || *dd[0].Name != "d0" {
		t.Fatalf("the failed attach's disk is not kept in the model: %+v", dd)
	}
	if len(w.rt.Running()) != 2 {
		t.Fatal("a running VM stopped when an attach failed")
	}
	// The CSI driver's retry: the same list again (kubernetes-sigs/azuredisk-csi-driver #797).
	if _, err := w.putDataDisks("rg", "disky", []*armcompute.DataDisk{attachEntry(0, d0)}); err != nil {
		t.Fatal(err)
	}
	if s := state("disky"); s != "Succeeded" {
		t.Fatalf("state %s after the next successful operation, want Succeeded", s)
	}
}
