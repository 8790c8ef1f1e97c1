package azuredisk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winkube/winkube/emulator/machines/cloudprovider"
)

// Names external-attacher v4.12.0 uses (pkg/controller/util.go
// GetFinalizerName: "external-attacher/" + the driver name with every
// character outside [a-zA-Z0-9-] replaced by "-"; csi_handler.go).
const (
	attacherFinalizer  = "external-attacher/disk-csi-azure-com"
	vaNodeIDAnnotation = "csi.alpha.kubernetes.io/node-id"
)

// The driver's limits (azuredisk-csi-driver v1.34.5
// pkg/azuredisk/controllerserver.go, azure_controller_common.go).
const (
	maxErrMsgLength = 990
	maxLUN          = 64
	// diskCachingLimit: caching is None from this size on.
	diskCachingLimit = 4096
	lunKey           = "LUN"
)

// syncAttachment is external-attacher's VolumeAttachment handling
// (csi_handler.go syncAttach, syncDetach) for this driver's attachments.
func (c *Controller) syncAttachment(ctx context.Context, name string) error {
	o, ok, _ := c.vas.GetByKey(name)
	if !ok {
		return nil
	}
	va := o.(*storagev1.VolumeAttachment)
	if va.Spec.Attacher != DriverName {
		return nil
	}
	dc, err := c.acting(ctx, RoleAttacher)
	if dc == nil {
		return err
	}
	if va.DeletionTimestamp != nil {
		return c.detach(ctx, dc, va)
	}
	if va.Status.Attached {
		return nil
	}
	lun, err := c.csiAttach(ctx, dc, va)
	if err != nil {
		// saveAttachError: the message as the error reads.
		_ = c.patchStatus(ctx, dc, va.Name, map[string]any{"attachError": map[string]any{"message": err.Error(), "time": metav1.Now()}})
		return fmt.Errorf("failed to attach: %s", err)
	}
	// markAsAttached.
	return c.patchStatus(ctx, dc, va.Name, map[string]any{"attached": true, "attachmentMetadata": map[string]string{lunKey: strconv.Itoa(lun)}, "attachError": nil})
}

// csiAttach checks what it can before it puts its finalizer on the
// attachment (a finalizer would block the attachment's deletion on an
// error): the PV, its own finalizer on the PV, the node's ID from its
// CSINode; then ControllerPublishVolume.
func (c *Controller) csiAttach(ctx context.Context, dc *driverCloud, va *storagev1.VolumeAttachment) (int, error) {
	src, err := c.csiSource(va)
	if err != nil {
		return 0, err
	}
	if pvName := va.Spec.Source.PersistentVolumeName; pvName != nil {
		o, ok, _ := c.pvs.GetByKey(*pvName)
		if !ok {
			return 0, fmt.Errorf("persistentvolume %q not found", *pvName)
		}
		pv := o.(*corev1.PersistentVolume)
		if pv.DeletionTimestamp != nil {
			return 0, fmt.Errorf("PersistentVolume %q is marked for deletion", pv.Name)
		}
		if !slices.Contains(pv.Finalizers, attacherFinalizer) {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": append(slices.Clone(pv.Finalizers), attacherFinalizer), "resourceVersion": pv.ResourceVersion}})
			if _, err := dc.api.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return 0, fmt.Errorf("could not add PersistentVolume finalizer: %s", err)
			}
		}
	}
	nodeID, err := c.nodeID(va.Spec.NodeName, nil)
	if err != nil {
		return 0, err
	}
	if !slices.Contains(va.Finalizers, attacherFinalizer) || va.Annotations[vaNodeIDAnnotation] != nodeID {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"finalizers":  append(slices.DeleteFunc(slices.Clone(va.Finalizers), func(f string) bool { return f == attacherFinalizer }), attacherFinalizer),
			"annotations": map[string]string{vaNodeIDAnnotation: nodeID}, "resourceVersion": va.ResourceVersion}})
		if _, err := dc.api.StorageV1().VolumeAttachments().Patch(ctx, va.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return 0, fmt.Errorf("could not save VolumeAttachment: %s", err)
		}
	}
	return c.publish(ctx, dc, src, nodeID, va.Name)
}

// csiSource is the attachment's CSI volume: its PV's, or an inline one.
func (c *Controller) csiSource(va *storagev1.VolumeAttachment) (*corev1.CSIPersistentVolumeSource, error) {
	s := va.Spec.Source
	switch {
	case s.PersistentVolumeName != nil && s.InlineVolumeSpec != nil:
		return nil, errors.New("both InlineCSIVolumeSource and PersistentVolumeName specified in VA source")
	case s.PersistentVolumeName != nil:
		o, ok, _ := c.pvs.GetByKey(*s.PersistentVolumeName)
		if !ok {
			return nil, fmt.Errorf("persistentvolume %q not found", *s.PersistentVolumeName)
		}
		if pv := o.(*corev1.PersistentVolume); pv.Spec.CSI != nil {
			return pv.Spec.CSI, nil
		}
		return nil, errors.New("CSI volume source was nil")
	case s.InlineVolumeSpec != nil && s.InlineVolumeSpec.CSI != nil:
		return s.InlineVolumeSpec.CSI, nil
	case s.InlineVolumeSpec != nil:
		return nil, errors.New("inline volume spec contains nil CSI source")
	}
	return nil, errors.New("neither InlineCSIVolumeSource nor PersistentVolumeName specified in VA source")
}

// nodeID is the driver's ID of a node from its CSINode (getNodeID); a
// detach falls back to the ID the attach recorded on the attachment.
func (c *Controller) nodeID(node string, va *storagev1.VolumeAttachment) (string, error) {
	var err error
	if o, ok, _ := c.csiNodes.GetByKey(node); ok {
		for _, d := range o.(*storagev1.CSINode).Spec.Drivers {
			if d.Name == DriverName {
				return d.NodeID, nil
			}
		}
		err = fmt.Errorf("CSINode %s does not contain driver %s", node, DriverName)
	} else {
		err = fmt.Errorf("csinode.storage.k8s.io %q not found", node)
	}
	if va != nil {
		if id, ok := va.Annotations[vaNodeIDAnnotation]; ok {
			return id, nil
		}
	}
	return "", err
}

// vm is a node's virtual machine, from the provider ID the cloud node
// manager set on its Node.
type vm struct {
	sub, rg, name, id string
}

// errInstanceNotFound is cloud-provider-azure's cloudprovider.InstanceNotFound.
var errInstanceNotFound = errors.New("instance not found")

func (c *Controller) vmOf(node string) (vm, error) {
	o, ok, _ := c.nodes.GetByKey(node)
	if !ok {
		return vm{}, errInstanceNotFound
	}
	pid := o.(*corev1.Node).Spec.ProviderID
	id, found := strings.CutPrefix(pid, "azure://")
	if !found {
		return vm{}, errInstanceNotFound
	}
	parts := strings.Split(strings.Trim(id, "/"), "/")
	if len(parts) == 8 && strings.EqualFold(parts[6], "virtualMachines") {
		return vm{sub: parts[1], rg: parts[3], name: parts[7], id: id}, nil
	}
	if len(parts) == 10 && strings.EqualFold(parts[6], "virtualMachineScaleSets") {
		// The emulator's scale sets have no per-instance data disks yet.
		return vm{}, fmt.Errorf("node %s is scale set instance %s: the local world attaches disks to standalone and availability-set VMs only", node, id)
	}
	return vm{}, errInstanceNotFound
}

// vmByID is the node whose VM has an ARM ID.
func (c *Controller) nodeOfVM(id string) string {
	for _, o := range c.nodes.List() {
		n := o.(*corev1.Node)
		if v, ok := strings.CutPrefix(n.Spec.ProviderID, "azure://"); ok && strings.EqualFold(v, id) {
			return n.Name
		}
	}
	return ""
}

// publish is the driver's ControllerPublishVolume: a disk already on the
// VM keeps its LUN; otherwise the disk is checked (held by another VM,
// its state), and the VM is PUT with its data disks plus this one at the
// lowest free LUN, as cloud-provider-azure's availability-set VMSet does
// (pkg/provider/azure_controller_standard.go AttachDisk: only location and
// storageProfile.dataDisks).
func (c *Controller) publish(ctx context.Context, dc *driverCloud, src *corev1.CSIPersistentVolumeSource, nodeName, vaName string) (int, error) {
	diskURI := src.VolumeHandle
	dsub, drg, diskName, ok := parseDiskURI(diskURI)
	if !ok {
		return 0, rpcError("NotFound", "Volume not found, failed with error: invalid URI: %s", diskURI)
	}
	df, err := c.compute(dc, dsub)
	if err != nil {
		return 0, rpcError("Internal", "%v", err)
	}
	disk, err := df.NewDisksClient().Get(ctx, drg, diskName, nil)
	if err != nil {
		return 0, rpcError("NotFound", "Volume not found, failed with error: %v", err)
	}
	m, err := c.vmOf(nodeName)
	if errors.Is(err, errInstanceNotFound) {
		return 0, rpcError("NotFound", "failed to get azure instance id for node %q (%v)", nodeName, err)
	}
	if err != nil {
		return 0, rpcError("Internal", "failed to get azure instance id for node %q (%v)", nodeName, err)
	}
	attachErr := func(err error) error {
		return rpcError("Internal", "%s", truncateErrMsg(fmt.Sprintf("Attach volume %s to instance %s failed with %v", diskName, nodeName, err)))
	}
	lock := c.vmLock(m.id)
	lock.Lock()
	defer lock.Unlock()
	vf, err := c.compute(dc, m.sub)
	if err != nil {
		return 0, attachErr(err)
	}
	vms := vf.NewVirtualMachinesClient()
	cur, err := vms.Get(ctx, m.rg, m.name, nil)
	if notFound(err) {
		return 0, rpcError("NotFound", "failed to get azure instance id for node %q (%v)", nodeName, errInstanceNotFound)
	}
	if err != nil {
		return 0, attachErr(err)
	}
	entries := dataDisks(cur.VirtualMachine)
	for _, d := range entries {
		if d.ManagedDisk != nil && d.ManagedDisk.ID != nil && strings.EqualFold(*d.ManagedDisk.ID, diskURI) && d.Lun != nil {
			if d.ToBeDetached != nil && *d.ToBeDetached {
				return 0, attachErr(fmt.Errorf("disk(%s) is in ToBeDetached state on node(%s): detach in progress", diskURI, nodeName))
			}
			// Attached already (GetDiskLun).
			return int(*d.Lun), nil
		}
	}
	// AttachDisk's checks of the disk.
	if by := deref(disk.ManagedBy); by != "" && (disk.Properties == nil || deref(disk.Properties.MaxShares) <= 1) {
		other := c.nodeOfVM(by)
		if strings.EqualFold(by, m.id) {
			return 0, attachErr(fmt.Errorf("volume %s is actually attached to current node %s, return error", diskURI, nodeName))
		}
		// A dangling attachment: the driver detaches it from the other
		// node unless an attachment there still wants it.
		if other != "" && c.attachedElsewhere(diskURI, other, vaName) {
			return 0, rpcError("FailedPrecondition", "volume %s still has VolumeAttachments on node %s, refusing dangling detach", diskURI, other)
		}
		if err := c.detachFromVM(ctx, dc, diskURI, by); err != nil {
			return 0, rpcError("Internal", "Could not detach volume %s from node %s: %v", diskURI, other, err)
		}
		if disk, err = df.NewDisksClient().Get(ctx, drg, diskName, nil); err != nil {
			return 0, attachErr(err)
		}
	}
	if disk.Properties != nil && disk.Properties.DiskState != nil && *disk.Properties.DiskState != armcompute.DiskStateUnattached {
		return 0, attachErr(fmt.Errorf("state of disk(%s) is %s, not in expected Unattached state", diskURI, *disk.Properties.DiskState))
	}
	caching := armcompute.CachingTypes(parameter(src.VolumeAttributes, "cachingMode"))
	if caching == "" {
		caching = armcompute.CachingTypesReadOnly
	}
	if (disk.Properties != nil && deref(disk.Properties.DiskSizeGB) >= diskCachingLimit) ||
		(disk.SKU != nil && deref(disk.SKU.Name) == armcompute.DiskStorageAccountTypesPremiumV2LRS) {
		caching = armcompute.CachingTypesNone
	}
	writeAccel := strings.EqualFold(deref(disk.Tags["writeacceleratorenabled"]), "true")
	// SetDiskLun: the lowest LUN neither the VM's disks nor, with
	// --check-disk-lun-collision, the node's other attachments use.
	used := map[int]bool{}
	for _, d := range entries {
		if d.Lun != nil {
			used[int(*d.Lun)] = true
		}
	}
	for _, o := range c.vas.List() {
		va := o.(*storagev1.VolumeAttachment)
		if va.Name != vaName && va.Spec.NodeName == nodeName && va.Spec.Attacher == DriverName {
			if n, err := strconv.Atoi(va.Status.AttachmentMetadata[lunKey]); err == nil {
				used[n] = true
			}
		}
	}
	lun := -1
	for i := range maxLUN {
		if !used[i] {
			lun = i
			break
		}
	}
	if lun < 0 {
		return 0, attachErr(fmt.Errorf("could not find enough disk luns(current: %d) for diskMap(map[%s:%s], len=1), diskURI(%s)", len(used), strings.ToLower(diskURI), diskName, diskURI))
	}
	entries = append(entries, &armcompute.DataDisk{
		Name: to.Ptr(diskName), Lun: to.Ptr(int32(lun)), Caching: to.Ptr(caching),
		CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesAttach), ManagedDisk: &armcompute.ManagedDiskParameters{ID: to.Ptr(diskURI)},
		WriteAcceleratorEnabled: to.Ptr(writeAccel),
	})
	if err := c.putDataDisks(ctx, vms, m, cur.Location, entries); err != nil {
		return 0, attachErr(err)
	}
	return lun, nil
}

// attachedElsewhere says whether an attachment of the disk other than
// this one exists on a node.
func (c *Controller) attachedElsewhere(diskURI, node, vaName string) bool {
	for _, o := range c.vas.List() {
		va := o.(*storagev1.VolumeAttachment)
		if va.Name == vaName || va.Spec.NodeName != node || va.Spec.Attacher != DriverName {
			continue
		}
		if src, err := c.csiSource(va); err == nil && strings.EqualFold(src.VolumeHandle, diskURI) {
			return true
		}
	}
	return false
}

func dataDisks(v armcompute.VirtualMachine) []*armcompute.DataDisk {
	if v.Properties == nil || v.Properties.StorageProfile == nil {
		return nil
	}
	return slices.Clone(v.Properties.StorageProfile.DataDisks)
}

// putDataDisks PUTs a VM with only its location and data disks, as
// cloud-provider-azure does for attach and detach.
func (c *Controller) putDataDisks(ctx context.Context, vms *armcompute.VirtualMachinesClient, m vm, location *string, disks []*armcompute.DataDisk) error {
	if disks == nil {
		disks = []*armcompute.DataDisk{}
	}
	p, err := vms.BeginCreateOrUpdate(ctx, m.rg, m.name, armcompute.VirtualMachine{
		Location:   location,
		Properties: &armcompute.VirtualMachineProperties{StorageProfile: &armcompute.StorageProfile{DataDisks: disks}},
	}, nil)
	_, err = cloudprovider.Wait(ctx, p, err)
	return err
}

// detach is external-attacher's syncDetach: ControllerUnpublishVolume,
// then its finalizer off the attachment and the attachment marked
// detached (in that order: an attachment without the finalizer counts as
// detached).
func (c *Controller) detach(ctx context.Context, dc *driverCloud, va *storagev1.VolumeAttachment) error {
	if !slices.Contains(va.Finalizers, attacherFinalizer) {
		return nil
	}
	err := func() error {
		src, err := c.csiSource(va)
		if err != nil {
			return err
		}
		nodeID, err := c.nodeID(va.Spec.NodeName, va)
		if err != nil {
			return err
		}
		return c.unpublish(ctx, dc, src.VolumeHandle, nodeID)
	}()
	if err != nil {
		_ = c.patchStatus(ctx, dc, va.Name, map[string]any{"detachError": map[string]any{"message": err.Error(), "time": metav1.Now()}})
		return fmt.Errorf("failed to detach: %s", err)
	}
	keep := slices.DeleteFunc(slices.Clone(va.Finalizers), func(f string) bool { return f == attacherFinalizer })
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": keep, "resourceVersion": va.ResourceVersion}})
	if _, err := dc.api.StorageV1().VolumeAttachments().Patch(ctx, va.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("could not mark as detached: %s", err)
	}
	err = c.patchStatus(ctx, dc, va.Name, map[string]any{"attached": false, "detachError": nil, "attachmentMetadata": nil})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// unpublish is the driver's ControllerUnpublishVolume: a node or VM that
// is gone, or a disk no longer on the VM, counts as detached.
func (c *Controller) unpublish(ctx context.Context, dc *driverCloud, diskURI, nodeName string) error {
	m, err := c.vmOf(nodeName)
	if errors.Is(err, errInstanceNotFound) {
		return nil
	}
	if err != nil {
		return rpcError("Internal", "Could not detach volume %s from node %s: %v", diskURI, nodeName, err)
	}
	if err := c.detachFromVM(ctx, dc, diskURI, m.id); err != nil && !strings.Contains(strings.ToLower(err.Error()), "not found") {
		return rpcError("Internal", "Could not detach volume %s from node %s: %v", diskURI, nodeName, err)
	}
	return nil
}

// detachFromVM is the availability-set VMSet's DetachDisk: the disk's
// entry marked toBeDetached, the VM PUT with its location and data disks.
func (c *Controller) detachFromVM(ctx context.Context, dc *driverCloud, diskURI, vmID string) error {
	parts := strings.Split(strings.Trim(vmID, "/"), "/")
	if len(parts) != 8 {
		return fmt.Errorf("%s is not a virtual machine's ID", vmID)
	}
	m := vm{sub: parts[1], rg: parts[3], name: parts[7], id: vmID}
	lock := c.vmLock(m.id)
	lock.Lock()
	defer lock.Unlock()
	f, err := c.compute(dc, m.sub)
	if err != nil {
		return err
	}
	vms := f.NewVirtualMachinesClient()
	cur, err := vms.Get(ctx, m.rg, m.name, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	entries := dataDisks(cur.VirtualMachine)
	found := false
	for _, d := range entries {
		if d.ManagedDisk != nil && d.ManagedDisk.ID != nil && strings.EqualFold(*d.ManagedDisk.ID, diskURI) {
			d.ToBeDetached, found = to.Ptr(true), true
		}
	}
	if !found {
		return nil
	}
	return c.putDataDisks(ctx, vms, m, cur.Location, entries)
}

// patchStatus merges fields into an attachment's status, through the
// status subresource as external-attacher writes it.
func (c *Controller) patchStatus(ctx context.Context, dc *driverCloud, name string, status map[string]any) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = dc.api.StorageV1().VolumeAttachments().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// usedByAttachment says whether a VolumeAttachment names a PV.
func (c *Controller) usedByAttachment(pv string) bool {
	for _, o := range c.vas.List() {
		va := o.(*storagev1.VolumeAttachment)
		if n := va.Spec.Source.PersistentVolumeName; n != nil && *n == pv {
			return true
		}
	}
	return false
}

// truncateErrMsg keeps an error within what an event holds, as the driver
// does: the head for context, the tail for Azure's reason.
func truncateErrMsg(msg string) string {
	if len(msg) <= maxErrMsgLength {
		return msg
	}
	const ellipsis = " ... "
	head := (maxErrMsgLength - len(ellipsis)) * 2 / 5
	tail := maxErrMsgLength - head - len(ellipsis)
	return msg[:head] + ellipsis + msg[len(msg)-tail:]
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
