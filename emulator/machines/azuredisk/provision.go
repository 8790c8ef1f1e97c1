package azuredisk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winkube/winkube/emulator/machines/cloudprovider"
)

// Names external-provisioner v6.3.0 and its library use
// (pkg/controller/controller.go; sig-storage-lib-external-provisioner v13
// controller.go).
const (
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	annSelectedNode           = "volume.kubernetes.io/selected-node"
	annProvisionedBy          = "pv.kubernetes.io/provisioned-by"
	annDeletionSecretName     = "volume.kubernetes.io/provisioner-deletion-secret-name"
	annDeletionSecretNS       = "volume.kubernetes.io/provisioner-deletion-secret-namespace"
	provisionerFinalizer      = "external-provisioner.volume.kubernetes.io/finalizer"
	provisionerIDKey          = "storage.kubernetes.io/csiProvisionerIdentity"
	// The keys --extra-create-metadata adds to CreateVolume's parameters.
	pvcNameKey      = "csi.storage.k8s.io/pvc/name"
	pvcNamespaceKey = "csi.storage.k8s.io/pvc/namespace"
	pvNameKey       = "csi.storage.k8s.io/pv/name"
	fsTypeKey       = "csi.storage.k8s.io/fstype"
	csiPrefix       = "csi.storage.k8s.io/"
)

// What the driver names (azuredisk-csi-driver v1.34.5 pkg/azureconstants,
// pkg/azuredisk/azuredisk.go; cloud-provider-azure consts).
const (
	// TopologyKey is the driver's topology segment: "topology.<driver>/zone".
	TopologyKey = "topology." + DriverName + "/zone"
	// zoneLabel is the well-known zone label the driver also accepts.
	zoneLabel         = "topology.kubernetes.io/zone"
	createdByTag      = "k8s-azure-created-by"
	driverTag         = "kubernetes-azure-dd"
	pvcNameTag        = "kubernetes.io-created-for-pvc-name"
	pvcNamespaceTag   = "kubernetes.io-created-for-pvc-namespace"
	pvNameTag         = "kubernetes.io-created-for-pv-name"
	requestedSizeGiB  = "requestedsizegib"
	defaultSKU        = armcompute.DiskStorageAccountTypesStandardSSDLRS
	minimumDiskSizeGi = 1
	gib               = int64(1) << 30
)

// rpcError is an error as a CSI sidecar sees it from the driver's gRPC
// server (google.golang.org/grpc status.Error's text): the sidecars put
// that text in events and in VolumeAttachment status.
func rpcError(code, format string, args ...any) error {
	return fmt.Errorf("rpc error: code = %s desc = %s", code, fmt.Sprintf(format, args...))
}

// syncClaim is external-provisioner's claim handling: a claim the PV
// controller handed to this driver (the storage-provisioner annotation),
// not bound yet, gets a disk and a PersistentVolume; with a
// WaitForFirstConsumer class only once the scheduler chose its node.
func (c *Controller) syncClaim(ctx context.Context, key string) error {
	o, ok, _ := c.pvcs.GetByKey(key)
	if !ok {
		return nil
	}
	pvc := o.(*corev1.PersistentVolumeClaim)
	if pvc.DeletionTimestamp != nil || pvc.Spec.VolumeName != "" ||
		(pvc.Annotations[annStorageProvisioner] != DriverName && pvc.Annotations[annBetaStorageProvisioner] != DriverName) {
		return nil
	}
	dc, err := c.acting(ctx, RoleProvisioner)
	if dc == nil {
		return err
	}
	scName := ""
	if pvc.Spec.StorageClassName != nil {
		scName = *pvc.Spec.StorageClassName
	}
	so, ok, _ := c.classes.GetByKey(scName)
	if !ok {
		return fmt.Errorf("storageclass.storage.k8s.io %q not found", scName)
	}
	sc := so.(*storagev1.StorageClass)
	if sc.Provisioner != DriverName {
		return nil
	}
	if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer && pvc.Annotations[annSelectedNode] == "" {
		return nil
	}
	pvName := "pvc-" + string(pvc.UID)
	if _, exists, _ := c.pvs.GetByKey(pvName); exists {
		// Provisioned already: the PV controller binds it.
		return nil
	}
	ref := corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}
	c.event(ctx, dc, ref, corev1.EventTypeNormal, "Provisioning", fmt.Sprintf("External provisioner is provisioning volume for claim %q", pvc.Namespace+"/"+pvc.Name))
	pv, err := c.provision(ctx, dc, pvc, sc, pvName)
	if err != nil {
		c.event(ctx, dc, ref, corev1.EventTypeWarning, "ProvisioningFailed", fmt.Sprintf("failed to provision volume with StorageClass %q: %v", sc.Name, err))
		return err
	}
	if _, err := dc.api.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	c.event(ctx, dc, ref, corev1.EventTypeNormal, "ProvisioningSucceeded", "Successfully provisioned volume "+pvName)
	return nil
}

// segment is a topology segment: key → value.
type segment map[string]string

// accessibility is external-provisioner's accessibility requirement with
// --strict-topology (pkg/controller/topology.go
// GenerateAccessibilityRequirements): for a chosen node, its own segment
// from the topology keys its CSINode entry lists and the node's labels;
// without one, the segments of every node the driver registered on.
func (c *Controller) accessibility(pvc *corev1.PersistentVolumeClaim) ([]segment, error) {
	selected := pvc.Annotations[annSelectedNode]
	if selected == "" {
		var segs []segment
		for _, o := range c.csiNodes.List() {
			cn := o.(*storagev1.CSINode)
			keys := topologyKeys(cn)
			no, ok, _ := c.nodes.GetByKey(cn.Name)
			if len(keys) == 0 || !ok {
				continue
			}
			if s, missing := nodeSegment(no.(*corev1.Node), keys); !missing && !slices.ContainsFunc(segs, func(o segment) bool { return equalSegments(o, s) }) {
				segs = append(segs, s)
			}
		}
		if len(segs) == 0 {
			return nil, errors.New("no available topology found")
		}
		return segs, nil
	}
	co, ok, _ := c.csiNodes.GetByKey(selected)
	if !ok {
		return nil, fmt.Errorf("failed to get selected CSINode %s: csinode.storage.k8s.io %q not found", selected, selected)
	}
	keys := topologyKeys(co.(*storagev1.CSINode))
	if len(keys) == 0 {
		return nil, fmt.Errorf("no topology key found for node %s", selected)
	}
	no, ok, _ := c.nodes.GetByKey(selected)
	if !ok {
		return nil, fmt.Errorf("failed to get node %s: node %q not found", selected, selected)
	}
	node := no.(*corev1.Node)
	s, missing := nodeSegment(node, keys)
	if missing {
		return nil, fmt.Errorf("topology labels from selected node %v does not match topology keys from CSINode %v", node.Labels, keys)
	}
	return []segment{s}, nil
}

func topologyKeys(cn *storagev1.CSINode) []string {
	for _, d := range cn.Spec.Drivers {
		if d.Name == DriverName {
			return d.TopologyKeys
		}
	}
	return nil
}

func nodeSegment(n *corev1.Node, keys []string) (segment, bool) {
	s := segment{}
	for _, k := range keys {
		v, ok := n.Labels[k]
		if !ok {
			return nil, true
		}
		s[k] = v
	}
	return s, false
}

func equalSegments(a, b segment) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// parameter is a class parameter by name, case-insensitive, as the driver
// reads them (azureutils.ParseDiskParameters lowercases the keys).
func parameter(params map[string]string, name string) string {
	for k, v := range params {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// provision is external-provisioner's Provision with the driver's
// CreateVolume: the request's parameters (the class's, less the
// csi.storage.k8s.io/ ones it consumes, plus the claim's and the PV's
// names), the size rounded up to GiB, the zone from the topology, the disk
// PUT, then the PersistentVolume the provisioner writes from the answer.
func (c *Controller) provision(ctx context.Context, dc *driverCloud, pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass, pvName string) (*corev1.PersistentVolume, error) {
	topology, err := c.accessibility(pvc)
	if err != nil {
		return nil, fmt.Errorf("error generating accessibility requirements: %v", err)
	}
	params := map[string]string{}
	fsType := ""
	for k, v := range sc.Parameters {
		if strings.HasPrefix(k, csiPrefix) {
			if k == fsTypeKey {
				fsType = v
			}
			continue
		}
		params[k] = v
	}
	params[pvcNameKey], params[pvcNamespaceKey], params[pvNameKey] = pvc.Name, pvc.Namespace, pvName

	// CreateVolume (pkg/azuredisk/controllerserver.go).
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	size := (request.Value() + gib - 1) / gib
	if size < minimumDiskSizeGi {
		size = minimumDiskSizeGi
	}
	if limit, ok := pvc.Spec.Resources.Limits[corev1.ResourceStorage]; ok && size*gib > limit.Value() {
		return nil, rpcError("InvalidArgument", "After round-up, volume size exceeds the limit specified")
	}
	sku := armcompute.DiskStorageAccountTypes(parameter(params, "skuName"))
	if sku == "" {
		sku = armcompute.DiskStorageAccountTypes(parameter(params, "storageAccountType"))
	}
	if sku == "" {
		sku = defaultSKU
	} else if !slices.Contains(armcompute.PossibleDiskStorageAccountTypesValues(), sku) {
		return nil, rpcError("InvalidArgument", "azureDisk - %s is not supported sku/storageaccounttype. Supported values are %s", sku, armcompute.PossibleDiskStorageAccountTypesValues())
	}
	sub, rg, location := dc.config.SubscriptionID, dc.config.ResourceGroup, dc.config.Location
	if v := parameter(params, "subscriptionID"); v != "" {
		sub = v
	}
	if v := parameter(params, "resourceGroup"); v != "" {
		rg = v
	}
	if v := parameter(params, "location"); v != "" {
		location = v
	}
	tags := map[string]*string{createdByTag: to.Ptr(driverTag),
		pvcNameTag: to.Ptr(pvc.Name), pvcNamespaceTag: to.Ptr(pvc.Namespace), pvNameTag: to.Ptr(pvName)}
	if v := parameter(params, "tags"); v != "" {
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, rpcError("InvalidArgument", "Tags '%s' are invalid, the format should like: 'key1=value1,key2=value2'", v)
			}
			tags[strings.TrimSpace(k)] = to.Ptr(strings.TrimSpace(val))
		}
	}
	zone := pickZone(topology, location)
	zrs := strings.HasSuffix(strings.ToLower(string(sku)), "zrs")
	if zrs {
		zone = ""
	}
	disk := armcompute.Disk{
		Location: to.Ptr(location), Tags: tags, SKU: &armcompute.DiskSKU{Name: to.Ptr(sku)},
		Properties: &armcompute.DiskProperties{
			CreationData: &armcompute.CreationData{CreateOption: to.Ptr(armcompute.DiskCreateOptionEmpty)},
			DiskSizeGB:   to.Ptr(int32(size)),
		},
	}
	if zone != "" {
		// GetZoneID: the zone number without the location.
		disk.Zones = []*string{to.Ptr(strings.TrimPrefix(zone, location+"-"))}
	}
	f, err := c.compute(dc, sub)
	if err != nil {
		return nil, rpcError("Internal", "%v", err)
	}
	p, err := f.NewDisksClient().BeginCreateOrUpdate(ctx, rg, pvName, disk, nil)
	created, err := cloudprovider.Wait(ctx, p, err)
	if err != nil {
		if strings.Contains(err.Error(), "NotFound") {
			return nil, rpcError("NotFound", "%v", err)
		}
		return nil, rpcError("Internal", "%v", err)
	}
	diskURI := fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/disks/%s", sub, rg, pvName)
	if created.ID != nil {
		diskURI = *created.ID
	}
	attributes := map[string]string{provisionerIDKey: dc.identity}
	for k, v := range params {
		attributes[k] = v
	}
	attributes[requestedSizeGiB] = strconv.FormatInt(size, 10)
	accessible := []segment{{TopologyKey: zone}}
	if zrs {
		accessible = nil
		for i := 1; i <= 4; i++ {
			accessible = append(accessible, segment{TopologyKey: fmt.Sprintf("%s-%d", location, i)})
		}
		accessible = append(accessible, segment{TopologyKey: ""})
	}

	// The PersistentVolume external-provisioner writes.
	reclaim := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		reclaim = *sc.ReclaimPolicy
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Finalizers: []string{provisionerFinalizer},
			Annotations: map[string]string{annProvisionedBy: DriverName, annDeletionSecretName: "", annDeletionSecretNS: ""}},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:                   pvc.Spec.AccessModes,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(size*gib, resource.BinarySI)},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              sc.Name,
			MountOptions:                  sc.MountOptions,
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: DriverName, VolumeHandle: diskURI, FSType: fsType, VolumeAttributes: attributes,
			}},
			NodeAffinity: nodeAffinity(accessible),
		},
	}
	return pv, nil
}

// pickZone is the driver's PickAvailabilityZone: the preferred, then the
// requisite segments (with strict topology both are the node's), the
// well-known zone key before the driver's, and only a value that is an
// availability zone of the location ("<location>-N"); "" for none.
func pickZone(topology []segment, location string) string {
	for _, s := range topology {
		for _, k := range []string{zoneLabel, TopologyKey} {
			if v := s[k]; v != "" && strings.HasPrefix(v, location+"-") {
				return v
			}
		}
	}
	return ""
}

// nodeAffinity is what external-provisioner makes of the volume's
// accessible topology: one required term per segment.
func nodeAffinity(segs []segment) *corev1.VolumeNodeAffinity {
	var terms []corev1.NodeSelectorTerm
	for _, s := range segs {
		var exprs []corev1.NodeSelectorRequirement
		keys := make([]string, 0, len(s))
		for k := range s {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{s[k]}})
		}
		terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: exprs})
	}
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
}

// syncVolume is external-provisioner's deleter for the volumes it
// provisioned (a Released PV whose reclaim policy is Delete) and
// external-attacher's PV finalizer, which it lifts once the PV is being
// deleted and no VolumeAttachment uses it.
func (c *Controller) syncVolume(ctx context.Context, name string) error {
	o, ok, _ := c.pvs.GetByKey(name)
	if !ok {
		return nil
	}
	pv := o.(*corev1.PersistentVolume)
	if pv.DeletionTimestamp != nil && slices.Contains(pv.Finalizers, attacherFinalizer) {
		if dc, err := c.acting(ctx, RoleAttacher); dc != nil && err == nil && !c.usedByAttachment(pv.Name) {
			if err := c.removeFinalizer(ctx, dc, pv, attacherFinalizer); err != nil {
				return err
			}
		}
	}
	if pv.Annotations[annProvisionedBy] != DriverName || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		pv.Status.Phase != corev1.VolumeReleased || pv.Spec.CSI == nil {
		return nil
	}
	dc, err := c.acting(ctx, RoleProvisioner)
	if dc == nil {
		return err
	}
	if err := c.deleteDisk(ctx, dc, pv.Spec.CSI.VolumeHandle); err != nil {
		ref := corev1.ObjectReference{Kind: "PersistentVolume", APIVersion: "v1", Name: pv.Name, UID: pv.UID, ResourceVersion: pv.ResourceVersion}
		c.event(ctx, dc, ref, corev1.EventTypeWarning, "VolumeFailedDelete", err.Error())
		return err
	}
	// The disk is gone: the provisioner's finalizer comes off, then the
	// PV goes.
	if slices.Contains(pv.Finalizers, provisionerFinalizer) {
		if err := c.removeFinalizer(ctx, dc, pv, provisionerFinalizer); err != nil {
			return err
		}
	}
	err = dc.api.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// deleteDisk is the driver's DeleteVolume (ManagedDiskController
// DeleteManagedDisk): a disk already gone is deleted; one a VM holds is
// refused. Its error is not a gRPC status, so the server reports it with
// code Unknown.
func (c *Controller) deleteDisk(ctx context.Context, dc *driverCloud, diskURI string) error {
	sub, rg, name, ok := parseDiskURI(diskURI)
	if !ok {
		// The driver logs it and answers success.
		return nil
	}
	f, err := c.compute(dc, sub)
	if err != nil {
		return rpcError("Unknown", "%v", err)
	}
	disks := f.NewDisksClient()
	d, err := disks.Get(ctx, rg, name, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return rpcError("Unknown", "%v", err)
	}
	if d.ManagedBy != nil && *d.ManagedBy != "" {
		return rpcError("Unknown", "disk(%s) already attached to node(%s), could not be deleted", diskURI, *d.ManagedBy)
	}
	p, err := disks.BeginDelete(ctx, rg, name, nil)
	if _, err := cloudprovider.Wait(ctx, p, err); err != nil && !notFound(err) {
		return rpcError("Unknown", "%v", err)
	}
	return nil
}

// parseDiskURI splits a managed disk's ARM ID.
func parseDiskURI(uri string) (sub, rg, name string, ok bool) {
	parts := strings.Split(strings.Trim(uri, "/"), "/")
	if len(parts) != 8 || !strings.EqualFold(parts[0], "subscriptions") || !strings.EqualFold(parts[2], "resourceGroups") ||
		!strings.EqualFold(parts[4], "providers") || !strings.EqualFold(parts[5], "Microsoft.Compute") || !strings.EqualFold(parts[6], "disks") {
		return "", "", "", false
	}
	return parts[1], parts[3], parts[7], true
}

func notFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// removeFinalizer takes one finalizer off a PV, as the sidecars do with a
// patch that fails if the list changed meanwhile.
func (c *Controller) removeFinalizer(ctx context.Context, dc *driverCloud, pv *corev1.PersistentVolume, finalizer string) error {
	cur, err := dc.api.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	keep := slices.DeleteFunc(slices.Clone(cur.Finalizers), func(f string) bool { return f == finalizer })
	if len(keep) == len(cur.Finalizers) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": keep, "resourceVersion": cur.ResourceVersion}})
	_, err = dc.api.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
