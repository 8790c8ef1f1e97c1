// Package virtualmachines creates and deletes VMs.
package virtualmachines

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// Image is a VM image: a marketplace image, a managed image ID, or a
// (community or private) gallery image version.
type Image struct {
	Publisher, Offer, SKU, Version string
	// ThirdParty says the marketplace image is sold through a purchase
	// plan, which every VM made from it must name (Plan).
	ThirdParty              bool
	ID                      string
	CommunityGalleryImageID string
	// PlanPublisher, PlanProduct and PlanName are the purchase plan of a
	// gallery image built from a marketplace image sold through one.
	PlanPublisher, PlanProduct, PlanName string
}

// Plan is the purchase plan a VM or scale set made from the image names:
// for a third-party marketplace image its SKU, offer and publisher (as
// CAPZ's ImageToPlan does, azure/converters/image.go @69ec3a40); nil for
// any other image. Azure fails the provisioning of a VM without it
// (VMMarketplaceInvalidInput).
func (i Image) Plan() *armcompute.Plan {
	switch {
	case i.ThirdParty && i.Publisher != "":
		return &armcompute.Plan{Name: to.Ptr(i.SKU), Product: to.Ptr(i.Offer), Publisher: to.Ptr(i.Publisher)}
	case i.PlanName != "":
		// A gallery image's plan, as CAPZ's ImageToPlan gives it
		// (azure/converters/image.go @69ec3a40).
		return &armcompute.Plan{Name: to.Ptr(i.PlanName), Product: to.Ptr(i.PlanProduct), Publisher: to.Ptr(i.PlanPublisher)}
	}
	return nil
}

// Spec is a VM.
type Spec struct {
	ResourceGroup, Name, Location string
	Size                          string
	Windows                       bool
	ComputerName                  string
	Image                         Image
	OSDiskSizeGB                  int32
	StorageAccountType            string
	Caching                       string
	CustomData                    []byte
	AdminUsername                 string
	// AdminPassword is required for Windows; it is sent once, at creation.
	AdminPassword string
	// SSHPublicKey is an OpenSSH authorized key for Linux.
	SSHPublicKey string
	NICID        string
	Zone         string
	// AvailabilitySetID places the VM in a set, where there are no zones.
	AvailabilitySetID string
	// Identity is "", SystemAssigned or UserAssigned; UserAssigned names
	// the identities' ARM IDs.
	Identity     string
	UserAssigned []string
	Tags         map[string]*string
	// Made says the VM was made before: if it is missing it was deleted
	// outside winkube, and Reconcile answers ErrVanished rather than
	// making it again.
	Made bool
}

// ErrVanished is Reconcile's answer for a VM that was made and is gone.
var ErrVanished = errors.New("the VM was made and has been deleted since")

// ProvisioningFailedError is a VM that Azure failed to provision.
type ProvisioningFailedError struct {
	Code, Message string
}

func (e *ProvisioningFailedError) Error() string {
	if e.Code == "" {
		return "VM provisioning failed: " + e.Message
	}
	return fmt.Sprintf("VM provisioning failed: %s: %s", e.Code, e.Message)
}

// ResourceRef makes a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }

// OwnerTags is nil: the machine controller checks the VM's role tag itself,
// to name the machine that holds the name.
func (s Spec) OwnerTags() map[string]*string { return nil }

// Parameters makes the VM once. A VM that exists is never sent again (its
// model cannot change, and its password must not be resent), only read: a
// provisioned one is done, a failed one a *ProvisioningFailedError, one
// still being made async.ErrNotYet. A VM made before and missing now was
// deleted outside winkube: ErrVanished.
func (s Spec) Parameters(existing *armcompute.VirtualMachine) (*armcompute.VirtualMachine, error) {
	if existing == nil {
		if s.Made {
			return nil, ErrVanished
		}
		vm := model(s)
		return &vm, nil
	}
	state := ""
	if existing.Properties != nil && existing.Properties.ProvisioningState != nil {
		state = *existing.Properties.ProvisioningState
	}
	switch state {
	case "Succeeded":
		return nil, nil
	case "Failed":
		return nil, &ProvisioningFailedError{Message: "Azure reports the VM's provisioning state as Failed"}
	default:
		return nil, async.ErrNotYet
	}
}

// Service manages VMs.
type Service struct {
	kind *async.Kind[armcompute.VirtualMachine]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armcompute.NewVirtualMachinesClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armcompute.VirtualMachine]{
		Noun: "virtual machine",
		Get: func(ctx context.Context, r async.Ref) (*armcompute.VirtualMachine, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.VirtualMachine, err
		},
		Put: func(ctx context.Context, r async.Ref, body armcompute.VirtualMachine, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armcompute.VirtualMachinesClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armcompute.VirtualMachinesClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(vm *armcompute.VirtualMachine) *string { return vm.Etag },
		Tags: func(vm *armcompute.VirtualMachine) map[string]*string { return vm.Tags },
	}}, nil
}

// Get returns the VM, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armcompute.VirtualMachine, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile creates the VM once (see Parameters). It returns the VM once
// provisioned, a *ProvisioningFailedError when Azure failed it, or the
// token of the creation under way.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (vm *armcompute.VirtualMachine, next string, err error) {
	next, done, err := async.Reconcile(ctx, s.kind, spec, token)
	if err != nil {
		if code := async.Code(err); code != "" && async.IsProvisioningFailure(code) {
			return nil, "", &ProvisioningFailedError{Code: code, Message: async.Message(err)}
		}
		return nil, next, err
	}
	if !done {
		return nil, next, nil
	}
	cur, err := s.Get(ctx, spec.ResourceGroup, spec.Name)
	return cur, "", err
}

func model(spec Spec) armcompute.VirtualMachine {
	img := ImageReference(spec.Image)
	osType := armcompute.OperatingSystemTypesLinux
	if spec.Windows {
		osType = armcompute.OperatingSystemTypesWindows
	}
	osProfile := &armcompute.OSProfile{
		ComputerName:  to.Ptr(spec.ComputerName),
		AdminUsername: to.Ptr(spec.AdminUsername),
		CustomData:    to.Ptr(base64.StdEncoding.EncodeToString(spec.CustomData)),
	}
	if spec.Windows {
		osProfile.AdminPassword = to.Ptr(spec.AdminPassword)
		osProfile.WindowsConfiguration = &armcompute.WindowsConfiguration{EnableAutomaticUpdates: to.Ptr(false)}
	} else {
		osProfile.LinuxConfiguration = LinuxConfiguration(spec.AdminUsername, spec.SSHPublicKey)
	}
	vm := armcompute.VirtualMachine{
		Location: to.Ptr(spec.Location), Tags: spec.Tags, Plan: spec.Image.Plan(),
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: to.Ptr(armcompute.VirtualMachineSizeTypes(spec.Size))},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: img,
				OSDisk: &armcompute.OSDisk{
					Name: to.Ptr(spec.Name + "_OSDisk"), OSType: to.Ptr(osType), CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesFromImage),
					DiskSizeGB: to.Ptr(spec.OSDiskSizeGB), Caching: to.Ptr(armcompute.CachingTypes(spec.Caching)),
					ManagedDisk: &armcompute.ManagedDiskParameters{StorageAccountType: to.Ptr(armcompute.StorageAccountTypes(spec.StorageAccountType))},
				},
			},
			OSProfile:          osProfile,
			NetworkProfile:     &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{ID: to.Ptr(spec.NICID), Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)}}}},
			DiagnosticsProfile: BootDiagnostics(),
		},
	}
	if spec.Zone != "" {
		vm.Zones = []*string{to.Ptr(spec.Zone)}
	}
	if spec.AvailabilitySetID != "" {
		vm.Properties.AvailabilitySet = &armcompute.SubResource{ID: to.Ptr(spec.AvailabilitySetID)}
	}
	switch spec.Identity {
	case "SystemAssigned":
		vm.Identity = &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeSystemAssigned)}
	case "UserAssigned":
		vm.Identity = &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned), UserAssignedIdentities: UserAssignedMap(spec.UserAssigned)}
	}
	return vm
}

// ImageReference is the SDK form of an image.
func ImageReference(i Image) *armcompute.ImageReference {
	img := &armcompute.ImageReference{}
	switch {
	case i.ID != "":
		img.ID = to.Ptr(i.ID)
	case i.CommunityGalleryImageID != "":
		img.CommunityGalleryImageID = to.Ptr(i.CommunityGalleryImageID)
	default:
		img.Publisher, img.Offer, img.SKU, img.Version = to.Ptr(i.Publisher), to.Ptr(i.Offer), to.Ptr(i.SKU), to.Ptr(i.Version)
	}
	return img
}

// LinuxConfiguration allows only key login, with the admin user's key.
func LinuxConfiguration(adminUsername, sshPublicKey string) *armcompute.LinuxConfiguration {
	return &armcompute.LinuxConfiguration{
		DisablePasswordAuthentication: to.Ptr(true),
		SSH: &armcompute.SSHConfiguration{PublicKeys: []*armcompute.SSHPublicKey{{
			Path: to.Ptr("/home/" + adminUsername + "/.ssh/authorized_keys"), KeyData: to.Ptr(sshPublicKey),
		}}},
	}
}

// OSDiskName is the name winkube gives a VM's OS disk.
func OSDiskName(vm string) string { return vm + "_OSDisk" }

// Delete deletes the VM (its disk and NIC stay, to be deleted after it).
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}

// BootDiagnostics turns on boot diagnostics with Azure's managed storage
// (no storage account of the cluster's): the serial console's log and a
// screenshot, readable through the API when a node never joins. CAPZ
// defaults every machine to it (internal/api/v1beta1/azuremachine_default.go
// @69ec3a40, setDefaultAzureMachineSpecDiagnostics; Managed is
// BootDiagnostics{Enabled: true} in azure/converters/diagnostics.go).
func BootDiagnostics() *armcompute.DiagnosticsProfile {
	return &armcompute.DiagnosticsProfile{BootDiagnostics: &armcompute.BootDiagnostics{Enabled: to.Ptr(true)}}
}

// UserAssignedMap is the identity block's map of user-assigned identities,
// keyed by ARM ID with empty values (Azure fills them in).
func UserAssignedMap(ids []string) map[string]*armcompute.UserAssignedIdentitiesValue {
	out := map[string]*armcompute.UserAssignedIdentitiesValue{}
	for _, id := range ids {
		out[id] = &armcompute.UserAssignedIdentitiesValue{}
	}
	return out
}

// PrincipalID is the VM's system-assigned identity's principal, once Azure
// made it.
func PrincipalID(vm *armcompute.VirtualMachine) string {
	if vm == nil || vm.Identity == nil || vm.Identity.PrincipalID == nil {
		return ""
	}
	return *vm.Identity.PrincipalID
}
