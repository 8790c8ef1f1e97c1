// Package scalesets manages virtual machine scale sets (uniform
// orchestration) and their instances.
package scalesets

import (
	"context"
	"encoding/base64"
	"sort"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

// Spec is a scale set's model and size.
type Spec struct {
	ResourceGroup, Name, Location string
	Size                          string
	Capacity                      int64
	Windows                       bool
	ComputerNamePrefix            string
	Image                         virtualmachines.Image
	OSDiskSizeGB                  int32
	StorageAccountType            string
	CustomData                    []byte
	AdminUsername                 string
	// AdminPassword is sent only when the scale set is created.
	AdminPassword string
	SSHPublicKey  string
	SubnetID      string
	Zones         []string
	Tags          map[string]*string
}

// Instance is one scale-set VM.
type Instance struct {
	ID                 string // ARM ID
	InstanceID         string
	ComputerName       string
	ProvisioningState  string
	LatestModelApplied bool
	PrivateIP          string
}

// Service manages scale sets.
type Service struct {
	sets *armcompute.VirtualMachineScaleSetsClient
	vms  *armcompute.VirtualMachineScaleSetVMsClient
	nics *armnetwork.InterfacesClient
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
	return &Service{sets: sets, vms: vms, nics: nics}, err
}

// Get returns the scale set, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armcompute.VirtualMachineScaleSet, error) {
	cur, err := s.sets.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.VirtualMachineScaleSet, nil
}

// Reconcile creates the scale set or updates its model and capacity.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	var exists bool
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.Get(ctx, spec.ResourceGroup, spec.Name)
		if err != nil || cur == nil {
			return false, err
		}
		exists = true
		return async.Succeeded(cur.Properties.ProvisioningState) && cur.SKU != nil && cur.SKU.Capacity != nil && *cur.SKU.Capacity == spec.Capacity &&
			sameModel(cur, spec), nil
	}, func(tok string) (*runtime.Poller[armcompute.VirtualMachineScaleSetsClientCreateOrUpdateResponse], error) {
		return s.sets.BeginCreateOrUpdate(ctx, spec.ResourceGroup, spec.Name, model(spec, !exists), &armcompute.VirtualMachineScaleSetsClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// ModelTag records, on the scale set, a digest of what its model was built
// from (image and custom data), since custom data is never returned by Azure.
const ModelTag = "winkube.dev_model"

// ModelDigest is the digest kept in ModelTag.
func ModelDigest(spec Spec) string {
	img := spec.Image
	return strconv.FormatUint(fnv(img.Publisher+"|"+img.Offer+"|"+img.SKU+"|"+img.Version+"|"+img.ID+"|"+img.CommunityGalleryImageID+"|"+string(spec.CustomData)), 36)
}

func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
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
	set := armcompute.VirtualMachineScaleSet{
		Location: to.Ptr(spec.Location), Tags: tags,
		SKU: &armcompute.SKU{Name: to.Ptr(spec.Size), Capacity: to.Ptr(spec.Capacity)},
		Properties: &armcompute.VirtualMachineScaleSetProperties{
			OrchestrationMode: to.Ptr(armcompute.OrchestrationModeUniform),
			UpgradePolicy:     &armcompute.UpgradePolicy{Mode: to.Ptr(armcompute.UpgradeModeManual)},
			VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{
				StorageProfile: &armcompute.VirtualMachineScaleSetStorageProfile{
					ImageReference: img,
					OSDisk: &armcompute.VirtualMachineScaleSetOSDisk{
						CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesFromImage), OSType: to.Ptr(osType), DiskSizeGB: to.Ptr(spec.OSDiskSizeGB),
						ManagedDisk: &armcompute.VirtualMachineScaleSetManagedDiskParameters{StorageAccountType: to.Ptr(armcompute.StorageAccountTypes(spec.StorageAccountType))},
					},
				},
				OSProfile: osProfile,
				NetworkProfile: &armcompute.VirtualMachineScaleSetNetworkProfile{NetworkInterfaceConfigurations: []*armcompute.VirtualMachineScaleSetNetworkConfiguration{{
					Name: to.Ptr(spec.Name + "-nic"),
					Properties: &armcompute.VirtualMachineScaleSetNetworkConfigurationProperties{
						Primary: to.Ptr(true),
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
			in := Instance{ID: *v.ID, InstanceID: *v.InstanceID}
			if p := v.Properties; p != nil {
				if p.OSProfile != nil && p.OSProfile.ComputerName != nil {
					in.ComputerName = *p.OSProfile.ComputerName
				}
				if p.ProvisioningState != nil {
					in.ProvisioningState = *p.ProvisioningState
				}
				in.LatestModelApplied = p.LatestModelApplied != nil && *p.LatestModelApplied
			}
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
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armcompute.VirtualMachineScaleSetVMsClientDeleteResponse], error) {
		return s.vms.BeginDelete(ctx, rg, name, instanceID, &armcompute.VirtualMachineScaleSetVMsClientBeginDeleteOptions{ResumeToken: tok})
	})
}

// Delete deletes the scale set with all its instances.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armcompute.VirtualMachineScaleSetsClientDeleteResponse], error) {
		return s.sets.BeginDelete(ctx, rg, name, &armcompute.VirtualMachineScaleSetsClientBeginDeleteOptions{ResumeToken: tok})
	})
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
