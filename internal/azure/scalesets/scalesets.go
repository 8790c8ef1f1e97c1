// Package scalesets manages virtual machine scale sets (uniform
// orchestration) and their instances.
package scalesets

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

// Spec is a scale set's model and size.
//
// Capacity is how many instances the scale set is to have at least: a
// write never lowers the capacity Azure has (Azure would choose which
// instances go); a pool lowers it by deleting the instances it chose, each
// deletion lowering Azure's capacity by one. The capacity kept is the one
// read for the write, which carries that read's ETag, never an earlier
// read's: an instance deleted since would come back as a new VM. CAPZ
// likewise writes only a capacity above the one it has just read
// (azure/services/scalesets/spec.go existingParameters, read by
// azure/services/async/async.go CreateOrUpdateResource,
// kubernetes-sigs/cluster-api-provider-azure 69ec3a40).
type Spec struct {
	ResourceGroup, Name, Location string
	Size                          string
	Capacity                      int64
	Windows                       bool
	ComputerNamePrefix            string
	Image                         virtualmachines.Image
	OSDiskSizeGB                  int32
	StorageAccountType            string
	// Caching is the OS disk's host caching (ReadWrite, ReadOnly, None);
	// Azure's default when empty.
	Caching string
	// Accelerated turns accelerated networking on for the instances' NICs.
	Accelerated bool
	// Identity is "", SystemAssigned or UserAssigned (UserAssigned's ARM
	// IDs), the instances' managed identity.
	Identity      string
	UserAssigned  []string
	CustomData    []byte
	AdminUsername string
	// AdminPassword is sent only when the scale set is created.
	AdminPassword string
	SSHPublicKey  string
	SubnetID      string
	Zones         []string
	Tags          map[string]*string
	// LastAppliedTags are the additional tags an earlier write sent (the
	// record of tags.LastAppliedAnnotation): a write of the model removes
	// those Tags no longer has and keeps every other tag the scale set has.
	LastAppliedTags map[string]string
}

// Instance is one scale-set VM.
type Instance struct {
	ID                 string // ARM ID
	InstanceID         string
	ComputerName       string
	ProvisioningState  string
	LatestModelApplied bool
	PrivateIP          string
	// What the instance runs as Azure reports it: its size, image, OS
	// disk and zone.
	Size         string
	Image        virtualmachines.Image
	OSDiskSizeGB int32
	StorageType  string
	Zone         string
}

// Current reports whether the instance runs the model's size, image, OS
// disk and zones: what only a new instance can change. Azure's
// latestModelApplied is not enough, because any write of the model, new
// custom data included, clears it on every instance; new custom data, or
// new tags, are no reason to replace a node that has joined.
func (in Instance) Current(spec Spec) bool {
	zoneOK := len(spec.Zones) == 0 || in.Zone == ""
	for _, z := range spec.Zones {
		zoneOK = zoneOK || z == in.Zone
	}
	storage := spec.StorageAccountType
	return in.Size == spec.Size && sameImage(in.Image, spec.Image) && in.OSDiskSizeGB == spec.OSDiskSizeGB &&
		(storage == "" || in.StorageType == "" || strings.EqualFold(in.StorageType, storage)) && zoneOK
}

// sameImage compares an instance's image as ARM returns it with the
// model's. ARM's imageReference carries no thirdPartyImage flag (the plan
// is a separate property) and returns names and IDs in the case it keeps
// them, which may not be the request's: publisher, offer, SKU and resource
// IDs are case-insensitive in ARM.
func sameImage(got, want virtualmachines.Image) bool {
	return strings.EqualFold(got.Publisher, want.Publisher) && strings.EqualFold(got.Offer, want.Offer) &&
		strings.EqualFold(got.SKU, want.SKU) && strings.EqualFold(got.Version, want.Version) &&
		strings.EqualFold(got.ID, want.ID) && strings.EqualFold(got.CommunityGalleryImageID, want.CommunityGalleryImageID)
}

// Service manages scale sets.
type Service struct {
	sets      *armcompute.VirtualMachineScaleSetsClient
	vms       *armcompute.VirtualMachineScaleSetVMsClient
	nics      *armnetwork.InterfacesClient
	kind      *async.Kind[armcompute.VirtualMachineScaleSet]
	instances *async.Kind[armcompute.VirtualMachineScaleSetVM]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	sets, err := endpoint.NewClient(cfg, subscription, armcompute.NewVirtualMachineScaleSetsClient)
	if err != nil {
		return nil, err
	}
	vms, err := endpoint.NewClient(cfg, subscription, armcompute.NewVirtualMachineScaleSetVMsClient)
	if err != nil {
		return nil, err
	}
	nics, err := endpoint.NewClient(cfg, subscription, armnetwork.NewInterfacesClient)
	if err != nil {
		return nil, err
	}
	return &Service{sets: sets, vms: vms, nics: nics,
		kind: &async.Kind[armcompute.VirtualMachineScaleSet]{
			Noun: "virtual machine scale set",
			Get: func(ctx context.Context, r async.Ref) (*armcompute.VirtualMachineScaleSet, error) {
				cur, err := sets.Get(ctx, r.ResourceGroup, r.Name, nil)
				return &cur.VirtualMachineScaleSet, err
			},
			Put: func(ctx context.Context, r async.Ref, body armcompute.VirtualMachineScaleSet, tok string) (async.Poller, error) {
				return async.Wrap(sets.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armcompute.VirtualMachineScaleSetsClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
			},
			Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
				return async.Wrap(sets.BeginDelete(ctx, r.ResourceGroup, r.Name, &armcompute.VirtualMachineScaleSetsClientBeginDeleteOptions{ResumeToken: tok}))
			},
			ETag: func(ss *armcompute.VirtualMachineScaleSet) *string { return ss.Etag },
			Tags: func(ss *armcompute.VirtualMachineScaleSet) map[string]*string { return ss.Tags },
		},
		instances: &async.Kind[armcompute.VirtualMachineScaleSetVM]{
			Noun: "scale set instance",
			Get: func(ctx context.Context, r async.Ref) (*armcompute.VirtualMachineScaleSetVM, error) {
				cur, err := vms.Get(ctx, r.ResourceGroup, r.Parent, r.Name, nil)
				return &cur.VirtualMachineScaleSetVM, err
			},
			Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
				return async.Wrap(vms.BeginDelete(ctx, r.ResourceGroup, r.Parent, r.Name, &armcompute.VirtualMachineScaleSetVMsClientBeginDeleteOptions{ResumeToken: tok}))
			},
		},
	}, nil
}

// Get returns the scale set, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armcompute.VirtualMachineScaleSet, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// ResourceRef makes a Spec an async.Spec.
func (spec Spec) ResourceRef() async.Ref {
	return async.Ref{ResourceGroup: spec.ResourceGroup, Name: spec.Name}
}

// OwnerTags is nil: the pool controller names its scale set after itself.
func (spec Spec) OwnerTags() map[string]*string { return nil }

// Parameters creates the scale set or updates its model and capacity; nil
// when Azure has both as the spec says. New custom data alone is no reason
// to write the scale set: Cluster API's kubeadm bootstrap provider rewrites
// a pool's custom data whenever it rotates the join token (at half the
// token's lifetime), and a new model marks every instance out of date. It
// is sent with the next write the model needs, as CAPZ does. A write of the
// model is built over what Azure has (Merged), and a change of capacity
// alone is not a write of the model at all (Reconcile).
func (spec Spec) Parameters(existing *armcompute.VirtualMachineScaleSet) (*armcompute.VirtualMachineScaleSet, error) {
	if existing == nil {
		m := model(spec, true)
		return &m, nil
	}
	spec.Capacity = spec.capacityOver(existing)
	if existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) && existing.SKU != nil && existing.SKU.Capacity != nil &&
		*existing.SKU.Capacity == spec.Capacity && sameModel(existing, spec) {
		return nil, nil
	}
	m := Merged(spec, existing)
	return &m, nil
}

// Merged is the model PUT for a spec over the scale set Azure has: the
// spec's model, with what others add to a scale set kept, since a PUT
// replaces it. Azure Policy's initiatives for monitoring and Defender add
// VM extensions and a user-assigned identity; an operator sets scale-in
// and automatic-repair policies; cost and policy tools add tags. A tag
// winkube wrote before (LastAppliedTags) and the spec dropped is removed.
func Merged(spec Spec, existing *armcompute.VirtualMachineScaleSet) armcompute.VirtualMachineScaleSet {
	m := model(spec, false)
	if existing == nil {
		return m
	}
	t := map[string]*string{}
	for k, v := range existing.Tags {
		if last, ok := spec.LastAppliedTags[k]; ok && spec.Tags[k] == nil && v != nil && *v == last {
			continue
		}
		t[k] = v
	}
	for k, v := range m.Tags {
		t[k] = v
	}
	m.Tags = t
	if p := existing.Properties; p != nil {
		m.Properties.ScaleInPolicy, m.Properties.AutomaticRepairsPolicy = p.ScaleInPolicy, p.AutomaticRepairsPolicy
		if vp := p.VirtualMachineProfile; vp != nil {
			m.Properties.VirtualMachineProfile.ExtensionProfile = vp.ExtensionProfile
		}
	}
	if id := existing.Identity; id != nil && len(id.UserAssignedIdentities) > 0 {
		// User-assigned identities others attached stay; whether the
		// scale set has a system-assigned one is the spec's to say.
		uai := map[string]*armcompute.UserAssignedIdentitiesValue{}
		for k := range id.UserAssignedIdentities {
			uai[k] = &armcompute.UserAssignedIdentitiesValue{}
		}
		typ := armcompute.ResourceIdentityTypeUserAssigned
		if m.Identity != nil {
			for k, v := range m.Identity.UserAssignedIdentities {
				uai[k] = v
			}
			if m.Identity.Type != nil && *m.Identity.Type == armcompute.ResourceIdentityTypeSystemAssigned {
				typ = armcompute.ResourceIdentityTypeSystemAssignedUserAssigned
			}
		}
		m.Identity = &armcompute.VirtualMachineScaleSetIdentity{Type: to.Ptr(typ), UserAssignedIdentities: uai}
	}
	return m
}

// capacityOver is the capacity a write over cur sends: the spec's, or
// cur's when that is higher (Capacity).
func (spec Spec) capacityOver(cur *armcompute.VirtualMachineScaleSet) int64 {
	if cur != nil && cur.SKU != nil && cur.SKU.Capacity != nil && *cur.SKU.Capacity > spec.Capacity {
		return *cur.SKU.Capacity
	}
	return spec.Capacity
}

// capacityOnly reports whether Azure has the spec's model and only the
// capacity differs.
func capacityOnly(cur *armcompute.VirtualMachineScaleSet, spec Spec) bool {
	return cur != nil && cur.Properties != nil && async.Succeeded(cur.Properties.ProvisioningState) && cur.SKU != nil && cur.SKU.Capacity != nil &&
		*cur.SKU.Capacity != spec.Capacity && sameModel(cur, spec)
}

// Reconcile creates the scale set or updates its model and capacity (see
// Parameters). A change of capacity alone is a PATCH of sku.capacity and
// nothing else, so that the model, and what others added to it, is not
// sent at all: CAPZ likewise leaves the VM profile out of the write when
// only the capacity changed (azure/services/scalesets/spec.go
// existingParameters, kubernetes-sigs/cluster-api-provider-azure
// 69ec3a40). The PATCH carries the ETag read (If-Match).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	next, _, done, err := s.Write(ctx, spec, token)
	return next, done, err
}

// Write is Reconcile, and says whether it wrote the scale set (started or
// resumed a write). Whether to write is decided on the scale set as read
// here, not on a caller's earlier read, which an instance's deletion may
// have outdated; instances a caller listed before a write are not what
// the scale set has after it.
func (s *Service) Write(ctx context.Context, spec Spec, token string) (next string, wrote, done bool, err error) {
	rg, name := spec.ResourceGroup, spec.Name
	patch := func(etag *string, body armcompute.VirtualMachineScaleSetUpdate) func(context.Context, string) (async.Poller, error) {
		return func(ctx context.Context, tok string) (async.Poller, error) {
			return async.Wrap(s.sets.BeginUpdate(async.IfMatch(ctx, etag), rg, name, body, &armcompute.VirtualMachineScaleSetsClientBeginUpdateOptions{ResumeToken: tok}))
		}
	}
	if isUpdateToken(token) {
		next, done, err = async.Step(ctx, token, patch(nil, armcompute.VirtualMachineScaleSetUpdate{}))
		return next, true, done, err
	}
	if token == "" {
		cur, err := s.kind.Read(ctx, spec.ResourceRef())
		if err != nil {
			return "", false, false, err
		}
		spec.Capacity = spec.capacityOver(cur)
		if capacityOnly(cur, spec) {
			next, done, err = async.Step(ctx, "", patch(cur.Etag, capacityUpdate(cur, spec)))
			return next, true, done, err
		}
		if cur != nil {
			if body, err := spec.Parameters(cur); err == nil && body == nil {
				return "", false, true, nil
			}
		}
	}
	next, done, err = async.Reconcile(ctx, s.kind, spec, token)
	return next, true, done, err
}

// capacityUpdate is the PATCH of a capacity change: the capacity, and, when
// the custom data changed since the model was written (a rotated join
// token), the new custom data with its digest, so that the instances the
// change adds can join, as CAPZ sends custom data with a capacity change
// (shouldPatchCustomData, same file).
func capacityUpdate(cur *armcompute.VirtualMachineScaleSet, spec Spec) armcompute.VirtualMachineScaleSetUpdate {
	u := armcompute.VirtualMachineScaleSetUpdate{SKU: &armcompute.SKU{Capacity: to.Ptr(spec.Capacity)}}
	digest := CustomDataDigest(spec.CustomData)
	if v := cur.Tags[CustomDataTag]; v != nil && *v == digest {
		return u
	}
	u.Properties = &armcompute.VirtualMachineScaleSetUpdateProperties{VirtualMachineProfile: &armcompute.VirtualMachineScaleSetUpdateVMProfile{
		OSProfile: &armcompute.VirtualMachineScaleSetUpdateOSProfile{CustomData: to.Ptr(base64.StdEncoding.EncodeToString(spec.CustomData))},
	}}
	// A PATCH's tags replace the scale set's: all of them are sent.
	u.Tags = tags.Merge(cur.Tags, map[string]*string{CustomDataTag: to.Ptr(digest)})
	return u
}

// isUpdateToken reports whether a resume token is a PATCH's (the SDK
// names the response type it resumes into the token).
func isUpdateToken(token string) bool {
	var v struct {
		Type string `json:"type"`
	}
	return token != "" && json.Unmarshal([]byte(token), &v) == nil && strings.HasSuffix(v.Type, "ClientUpdateResponse")
}

// ModelTag records, on the scale set, a digest of its model's fields
// (ModelDigest); CustomDataTag one of the custom data it was last sent,
// which Azure never returns.
const (
	ModelTag      = "winkube.dev_model"
	CustomDataTag = "winkube.dev_customdata"
)

// ModelDigest is a digest of every field of the model that the spec sets,
// but the custom data and the capacity: what makes a write of the scale set
// necessary.
func ModelDigest(spec Spec) string {
	img := spec.Image
	zones := append([]string(nil), spec.Zones...)
	sort.Strings(zones)
	var tags []string
	for k, v := range spec.Tags {
		if !strings.HasPrefix(k, "winkube.dev_") && v != nil {
			tags = append(tags, k+"="+*v)
		}
	}
	sort.Strings(tags)
	fields := []string{spec.Size, img.Publisher, img.Offer, img.SKU, img.Version, img.ID, img.CommunityGalleryImageID,
		strconv.Itoa(int(spec.OSDiskSizeGB)), spec.StorageAccountType, strconv.FormatBool(spec.Windows), spec.ComputerNamePrefix,
		spec.AdminUsername, spec.SSHPublicKey, spec.SubnetID, strings.Join(zones, ","), strings.Join(tags, ",")}
	// Fields added later count only when set, so that the digest of a
	// scale set written before them stays the same and nothing rolls for
	// an upgrade of winkube alone.
	if img.ThirdParty {
		fields = append(fields, "plan")
	}
	if img.PlanName != "" {
		fields = append(fields, "plan="+img.PlanPublisher+"/"+img.PlanProduct+"/"+img.PlanName)
	}
	if spec.Caching != "" && spec.Caching != "ReadWrite" {
		fields = append(fields, "caching="+spec.Caching)
	}
	if spec.Accelerated {
		fields = append(fields, "accelerated")
	}
	if spec.Identity != "" {
		fields = append(fields, "identity="+spec.Identity+":"+strings.Join(spec.UserAssigned, ","))
	}
	return digest(fields...)
}

// CustomDataDigest is the digest kept in CustomDataTag.
func CustomDataDigest(data []byte) string { return digest(string(data)) }

func digest(fields ...string) string {
	h := fnv.New64a()
	for _, f := range fields {
		// The length first, so that no two field lists write the same bytes.
		_, _ = fmt.Fprintf(h, "%d:%s|", len(f), f)
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

func sameModel(cur *armcompute.VirtualMachineScaleSet, spec Spec) bool {
	v := cur.Tags[ModelTag]
	return v != nil && *v == ModelDigest(spec)
}

func model(spec Spec, create bool) armcompute.VirtualMachineScaleSet {
	img := virtualmachines.ImageReference(spec.Image)
	osType := armcompute.OperatingSystemTypesLinux
	if spec.Windows {
		osType = armcompute.OperatingSystemTypesWindows
	}
	osProfile := &armcompute.VirtualMachineScaleSetOSProfile{
		ComputerNamePrefix: to.Ptr(spec.ComputerNamePrefix), AdminUsername: to.Ptr(spec.AdminUsername),
		CustomData: to.Ptr(base64.StdEncoding.EncodeToString(spec.CustomData)),
	}
	if spec.Windows {
		if create {
			osProfile.AdminPassword = to.Ptr(spec.AdminPassword)
		}
		osProfile.WindowsConfiguration = &armcompute.WindowsConfiguration{EnableAutomaticUpdates: to.Ptr(false)}
	} else {
		osProfile.LinuxConfiguration = virtualmachines.LinuxConfiguration(spec.AdminUsername, spec.SSHPublicKey)
	}
	tags := map[string]*string{}
	for k, v := range spec.Tags {
		tags[k] = v
	}
	tags[ModelTag] = to.Ptr(ModelDigest(spec))
	tags[CustomDataTag] = to.Ptr(CustomDataDigest(spec.CustomData))
	set := armcompute.VirtualMachineScaleSet{
		Location: to.Ptr(spec.Location), Tags: tags, Plan: spec.Image.Plan(),
		SKU: &armcompute.SKU{Name: to.Ptr(spec.Size), Capacity: to.Ptr(spec.Capacity)},
		Properties: &armcompute.VirtualMachineScaleSetProperties{
			OrchestrationMode: to.Ptr(armcompute.OrchestrationModeUniform),
			UpgradePolicy:     &armcompute.UpgradePolicy{Mode: to.Ptr(armcompute.UpgradeModeManual)},
			// A Uniform scale set over-provisions by default: extra VMs boot,
			// run the join data, become nodes and are deleted again. One
			// placement group holds at most 100 VMs. CAPZ turns both off
			// (azure/services/scalesets/spec.go @69ec3a40, lines 208 and 231).
			Overprovision:        to.Ptr(false),
			SinglePlacementGroup: to.Ptr(false),
			VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{
				DiagnosticsProfile: virtualmachines.BootDiagnostics(),
				StorageProfile: &armcompute.VirtualMachineScaleSetStorageProfile{
					ImageReference: img,
					OSDisk: &armcompute.VirtualMachineScaleSetOSDisk{
						CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesFromImage), OSType: to.Ptr(osType), DiskSizeGB: to.Ptr(spec.OSDiskSizeGB),
						Caching:     caching(spec.Caching),
						ManagedDisk: &armcompute.VirtualMachineScaleSetManagedDiskParameters{StorageAccountType: to.Ptr(armcompute.StorageAccountTypes(spec.StorageAccountType))},
					},
				},
				OSProfile: osProfile,
				NetworkProfile: &armcompute.VirtualMachineScaleSetNetworkProfile{NetworkInterfaceConfigurations: []*armcompute.VirtualMachineScaleSetNetworkConfiguration{{
					Name: to.Ptr(spec.Name + "-nic"),
					Properties: &armcompute.VirtualMachineScaleSetNetworkConfigurationProperties{
						Primary:                     to.Ptr(true),
						EnableAcceleratedNetworking: to.Ptr(spec.Accelerated),
						// As CAPZ (azure/services/scalesets/spec.go,
						// 69ec3a40): pods' addresses may be routed to
						// a pool's nodes (host-gw, cloud routes).
						EnableIPForwarding: to.Ptr(true),
						IPConfigurations: []*armcompute.VirtualMachineScaleSetIPConfiguration{{
							Name:       to.Ptr("ipconfig1"),
							Properties: &armcompute.VirtualMachineScaleSetIPConfigurationProperties{Subnet: &armcompute.APIEntityReference{ID: to.Ptr(spec.SubnetID)}},
						}},
					},
				}}},
			},
		},
	}
	for _, z := range spec.Zones {
		set.Zones = append(set.Zones, to.Ptr(z))
	}
	switch spec.Identity {
	case "SystemAssigned":
		set.Identity = &armcompute.VirtualMachineScaleSetIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeSystemAssigned)}
	case "UserAssigned":
		set.Identity = &armcompute.VirtualMachineScaleSetIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned), UserAssignedIdentities: virtualmachines.UserAssignedMap(spec.UserAssigned)}
	}
	return set
}

// Instances lists the scale set's instances, by instance ID.
func (s *Service) Instances(ctx context.Context, rg, name string) ([]Instance, error) {
	var out []Instance
	p := s.vms.NewListPager(rg, name, nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, async.IgnoreNotFound(err)
		}
		for _, v := range page.Value {
			in := instanceOf(v)
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i].InstanceID)
		b, _ := strconv.Atoi(out[j].InstanceID)
		return a < b
	})
	return out, nil
}

// InstanceExists reports whether an instance still exists (an instance of a
// scale set that is gone does not).
func (s *Service) InstanceExists(ctx context.Context, rg, name, instanceID string) (bool, error) {
	_, err := s.vms.Get(ctx, rg, name, instanceID, nil)
	if err != nil {
		return false, async.IgnoreNotFound(err)
	}
	return true, nil
}

// DeleteInstance deletes one instance (the scale set's capacity drops by one).
func (s *Service) DeleteInstance(ctx context.Context, rg, name, instanceID, token string) (string, bool, error) {
	return async.Remove(ctx, s.instances, async.Ref{ResourceGroup: rg, Parent: name, Name: instanceID}, token)
}

// Delete deletes the scale set with all its instances.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}

// InstanceIPs maps instance IDs to their primary private addresses.
func (s *Service) InstanceIPs(ctx context.Context, rg, name string) (map[string]string, error) {
	out := map[string]string{}
	p := s.nics.NewListVirtualMachineScaleSetNetworkInterfacesPager(rg, name, nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return out, async.IgnoreNotFound(err)
		}
		for _, n := range page.Value {
			if n.Properties == nil || n.Properties.VirtualMachine == nil || n.Properties.VirtualMachine.ID == nil || len(n.Properties.IPConfigurations) == 0 {
				continue
			}
			vmID := *n.Properties.VirtualMachine.ID
			id := vmID[strings.LastIndex(vmID, "/")+1:]
			if ip := n.Properties.IPConfigurations[0].Properties.PrivateIPAddress; ip != nil {
				out[id] = *ip
			}
		}
	}
	return out, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefOr(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// instanceOf reads what winkube needs of a scale-set VM.
func instanceOf(v *armcompute.VirtualMachineScaleSetVM) Instance {
	in := Instance{ID: *v.ID, InstanceID: *v.InstanceID}
	if p := v.Properties; p != nil {
		if p.OSProfile != nil && p.OSProfile.ComputerName != nil {
			in.ComputerName = *p.OSProfile.ComputerName
		}
		if p.ProvisioningState != nil {
			in.ProvisioningState = *p.ProvisioningState
		}
		in.LatestModelApplied = p.LatestModelApplied != nil && *p.LatestModelApplied
		if p.HardwareProfile != nil && p.HardwareProfile.VMSize != nil {
			in.Size = string(*p.HardwareProfile.VMSize)
		}
		if sp := p.StorageProfile; sp != nil {
			in.Image = imageOf(sp.ImageReference)
			if d := sp.OSDisk; d != nil {
				in.OSDiskSizeGB = derefOr(d.DiskSizeGB)
				if d.ManagedDisk != nil && d.ManagedDisk.StorageAccountType != nil {
					in.StorageType = string(*d.ManagedDisk.StorageAccountType)
				}
			}
		}
	}
	if v.SKU != nil && v.SKU.Name != nil && in.Size == "" {
		in.Size = *v.SKU.Name
	}
	if len(v.Zones) > 0 && v.Zones[0] != nil {
		in.Zone = *v.Zones[0]
	}
	return in
}

// Instance reads one instance and its private address: what a pool's
// machine needs, without listing every instance and NIC of the scale set
// (which, for each of N machines every few seconds, grew as N squared).
// found is false when it does not exist.
func (s *Service) Instance(ctx context.Context, rg, name, instanceID string) (in Instance, found bool, err error) {
	v, err := s.vms.Get(ctx, rg, name, instanceID, nil)
	if err != nil {
		return Instance{}, false, async.IgnoreNotFound(err)
	}
	in = instanceOf(&v.VirtualMachineScaleSetVM)
	p := s.nics.NewListVirtualMachineScaleSetVMNetworkInterfacesPager(rg, name, instanceID, nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return in, true, async.IgnoreNotFound(err)
		}
		for _, n := range page.Value {
			if n.Properties != nil && len(n.Properties.IPConfigurations) > 0 && n.Properties.IPConfigurations[0].Properties != nil {
				if ip := n.Properties.IPConfigurations[0].Properties.PrivateIPAddress; ip != nil && in.PrivateIP == "" {
					in.PrivateIP = *ip
				}
			}
		}
	}
	return in, true, nil
}

func caching(c string) *armcompute.CachingTypes {
	if c == "" {
		return nil
	}
	return to.Ptr(armcompute.CachingTypes(c))
}

// AcceleratedNetworking is whether a scale set's model gives its
// instances accelerated networking.
func AcceleratedNetworking(set *armcompute.VirtualMachineScaleSet) bool {
	if set == nil || set.Properties == nil || set.Properties.VirtualMachineProfile == nil || set.Properties.VirtualMachineProfile.NetworkProfile == nil {
		return false
	}
	for _, c := range set.Properties.VirtualMachineProfile.NetworkProfile.NetworkInterfaceConfigurations {
		if c.Properties != nil && c.Properties.EnableAcceleratedNetworking != nil && *c.Properties.EnableAcceleratedNetworking {
			return true
		}
	}
	return false
}

// ModelImage is the image a scale set's model makes its instances of, as
// ARM reports it (no thirdPartyImage flag: the plan is a separate
// property); the zero Image for nil or a model without one.
func ModelImage(set *armcompute.VirtualMachineScaleSet) virtualmachines.Image {
	if set == nil || set.Properties == nil || set.Properties.VirtualMachineProfile == nil || set.Properties.VirtualMachineProfile.StorageProfile == nil {
		return virtualmachines.Image{}
	}
	return imageOf(set.Properties.VirtualMachineProfile.StorageProfile.ImageReference)
}

func imageOf(r *armcompute.ImageReference) virtualmachines.Image {
	if r == nil {
		return virtualmachines.Image{}
	}
	return virtualmachines.Image{Publisher: deref(r.Publisher), Offer: deref(r.Offer), SKU: deref(r.SKU), Version: deref(r.Version),
		ID: deref(r.ID), CommunityGalleryImageID: deref(r.CommunityGalleryImageID)}
}

// Zones are the zones a scale set runs in; none for nil.
func Zones(set *armcompute.VirtualMachineScaleSet) []string {
	var out []string
	if set != nil {
		for _, z := range set.Zones {
			if z != nil {
				out = append(out, *z)
			}
		}
	}
	return out
}

// PrincipalID is the scale set's system-assigned identity's principal.
func PrincipalID(set *armcompute.VirtualMachineScaleSet) string {
	if set == nil || set.Identity == nil || set.Identity.PrincipalID == nil {
		return ""
	}
	return *set.Identity.PrincipalID
}
