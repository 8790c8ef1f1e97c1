// Package virtualmachines creates and deletes VMs.
package virtualmachines

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

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

// ProvisioningFailedError is a VM that Azure reports Failed: its last
// operation failed (Azure's provisioning states, MicrosoftDocs/azure-compute-docs
// articles/virtual-machines/states-billing.md @3255b21d). It is not terminal
// unless Terminal says so: a VM that ran and went Failed (a data-disk attach
// or an extension that failed) returns to Succeeded with the next operation
// on it that succeeds, and a creation that failed for capacity or a slow
// guest (AllocationFailed, OSProvisioningTimedOut) is sent again.
type ProvisioningFailedError struct {
	Code, Message string
	// Ran says the VM had been provisioned before it failed: winkube does
	// not write it, only watches for Azure to report it Succeeded again.
	Ran bool
	// Terminal says that sending the same VM again cannot succeed: Azure
	// refused what the machine asks for (an image not prepared for
	// provisioning, a plan the image needs), so the Machine must change.
	Terminal bool
}

func (e *ProvisioningFailedError) Error() string {
	what := "VM provisioning failed"
	if e.Ran {
		what = "the VM's last operation failed"
	}
	if e.Code == "" {
		return what + ": " + e.Message
	}
	return fmt.Sprintf("%s: %s: %s", what, e.Code, e.Message)
}

// terminalCodes are failures that only a change of the VM asked for fixes:
// the guest image is not prepared for provisioning (OSProvisioningClientError,
// MicrosoftDocs/azure-docs articles/virtual-machines/troubleshooting/error-messages.md),
// a marketplace image sold with a plan the VM does not name. Everything else
// Azure fails a VM with (capacity, timeouts, internal errors) may succeed
// when sent again, which CAPZ does too: it treats no code of a failed VM
// operation specially and retries the reconcile with backoff
// (azure/services/async/async.go CreateOrUpdateResource @69ec3a40).
var terminalCodes = map[string]bool{"OSProvisioningClientError": true, "VMMarketplaceInvalidInput": true}

// errFailed is Parameters' answer for a VM that ran and is Failed; Reconcile
// reads the instance view for what failed.
var errFailed = errors.New("the VM is in provisioning state Failed")

// ResourceRef makes a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }

// OwnerTags is nil: the machine controller checks the VM's role tag itself,
// to name the machine that holds the name.
func (s Spec) OwnerTags() map[string]*string { return nil }

// Parameters makes the VM once. A VM that exists is only read, never
// written (its model cannot change, and its password must not be resent),
// as CAPZ's VMSpec.Parameters does for any existing VM
// (azure/services/virtualmachines/spec.go @69ec3a40): a provisioned one is
// done, and so is one being updated once it ran (a data-disk attach: it
// keeps running); one still being made is async.ErrNotYet. A VM that ran
// and is Failed is errFailed. A VM whose creation failed is sent again
// without its secrets (Azure keeps the password and custom data it was
// made with), which retries the creation. A VM made before and missing now
// was deleted outside winkube: ErrVanished.
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
	switch {
	case state == "Succeeded", state == "Updating" && s.Made:
		return nil, nil
	case state == "Failed" && s.Made:
		return nil, errFailed
	case state == "Failed":
		vm := model(s)
		vm.Properties.OSProfile.AdminPassword, vm.Properties.OSProfile.CustomData = nil, nil
		return &vm, nil
	default:
		return nil, async.ErrNotYet
	}
}

// Service manages VMs.
type Service struct {
	kind         *async.Kind[armcompute.VirtualMachine]
	instanceView func(ctx context.Context, rg, name string) (armcompute.VirtualMachineInstanceView, error)
	update       func(ctx context.Context, rg, name string, body armcompute.VirtualMachineUpdate, tok string) (async.Poller, error)
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armcompute.NewVirtualMachinesClient)
	if err != nil {
		return nil, err
	}
	svc := &Service{instanceView: func(ctx context.Context, rg, name string) (armcompute.VirtualMachineInstanceView, error) {
		v, err := c.InstanceView(ctx, rg, name, nil)
		return v.VirtualMachineInstanceView, err
	}, update: func(ctx context.Context, rg, name string, body armcompute.VirtualMachineUpdate, tok string) (async.Poller, error) {
		return async.Wrap(c.BeginUpdate(ctx, rg, name, body, &armcompute.VirtualMachinesClientBeginUpdateOptions{ResumeToken: tok}))
	}}
	svc.kind = &async.Kind[armcompute.VirtualMachine]{
		Noun: "virtual machine",
		Get: func(ctx context.Context, r async.Ref) (*armcompute.VirtualMachine, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.VirtualMachine, err
		},
		Put: func(ctx context.Context, r async.Ref, body armcompute.VirtualMachine, tok string) (async.Poller, error) {
			return async.WrapResult(func(res armcompute.VirtualMachinesClientCreateOrUpdateResponse) armcompute.VirtualMachine {
				return res.VirtualMachine
			})(
				c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armcompute.VirtualMachinesClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armcompute.VirtualMachinesClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(vm *armcompute.VirtualMachine) *string { return vm.Etag },
		Tags: func(vm *armcompute.VirtualMachine) map[string]*string { return vm.Tags },
	}
	return svc, nil
}

// Get returns the VM, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armcompute.VirtualMachine, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile creates the VM once (see Parameters). It returns the VM once
// provisioned (or being updated after it ran), a *ProvisioningFailedError
// when Azure reports it Failed, or the token of the creation under way.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (vm *armcompute.VirtualMachine, next string, err error) {
	var existing *armcompute.VirtualMachine
	if token == "" {
		if existing, err = s.Get(ctx, spec.ResourceGroup, spec.Name); err != nil {
			return nil, "", err
		}
	}
	return s.ReconcileFrom(ctx, spec, token, existing)
}

// ReconcileFrom is Reconcile starting from the VM as the caller just read
// it (existing; nil when Azure has none), or from the token of its
// operation under way, in which case the caller need not have read it:
// CAPZ polls an operation under way without reading its resource
// (azure/services/async/async.go CreateResource @0da94738). A VM that
// needs nothing is returned as read, and one just written as the PUT's
// final response carries it: neither is read again.
func (s *Service) ReconcileFrom(ctx context.Context, spec Spec, token string, existing *armcompute.VirtualMachine) (vm *armcompute.VirtualMachine, next string, err error) {
	next, done, cur, err := async.ReconcileRead(ctx, s.kind, spec, token, existing)
	if errors.Is(err, errFailed) {
		return nil, "", s.failure(ctx, spec)
	}
	if err != nil {
		if code := async.Code(err); code != "" && async.IsProvisioningFailure(code) {
			return nil, "", &ProvisioningFailedError{Code: code, Message: async.Message(err), Terminal: terminalCodes[code]}
		}
		return nil, next, err
	}
	if !done {
		return nil, next, nil
	}
	if cur != nil {
		return cur, "", nil
	}
	cur, err = s.Get(ctx, spec.ResourceGroup, spec.Name)
	return cur, "", err
}

// failure is what Azure says of a VM that ran and is Failed: its instance
// view's ProvisioningState/failed/<code> status and message.
func (s *Service) failure(ctx context.Context, spec Spec) error {
	view, err := s.instanceView(ctx, spec.ResourceGroup, spec.Name)
	if err != nil {
		return fmt.Errorf("reading the instance view of VM %s, which is in provisioning state Failed: %w", spec.Name, err)
	}
	f := &ProvisioningFailedError{Ran: true, Message: "Azure reports the VM's provisioning state as Failed"}
	for _, st := range view.Statuses {
		code := ptr(st.Code)
		if rest, ok := strings.CutPrefix(code, "ProvisioningState/failed"); ok {
			f.Code = strings.TrimPrefix(rest, "/")
			if m := ptr(st.Message); m != "" {
				f.Message = m
			}
		}
	}
	return f
}

func ptr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
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
					// Azure deletes the disk with the VM, so that winkube
					// never deletes an unattached disk, which carries no
					// tags and so nothing to prove it winkube's (the default
					// is Detach: armcompute v7.3.0 models.go, OSDisk).
					DeleteOption: to.Ptr(armcompute.DiskDeleteOptionTypesDelete),
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

// DeletesOSDisk says whether Azure deletes the VM's OS disk with it.
func DeletesOSDisk(vm *armcompute.VirtualMachine) bool {
	if vm == nil || vm.Properties == nil || vm.Properties.StorageProfile == nil || vm.Properties.StorageProfile.OSDisk == nil {
		return false
	}
	o := vm.Properties.StorageProfile.OSDisk.DeleteOption
	return o != nil && strings.EqualFold(string(*o), string(armcompute.DiskDeleteOptionTypesDelete))
}

// DeleteOSDiskWithVM has Azure delete the OS disk of a VM winkube made
// before it set deleteOption (the disk would outlive the VM, unattached and
// untagged). The option may change on any VM but one with an ephemeral OS
// disk (armcompute v7.3.0 models.go, OSDisk.DeleteOption), which winkube
// never makes.
func (s *Service) DeleteOSDiskWithVM(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Step(ctx, token, func(ctx context.Context, tok string) (async.Poller, error) {
		return s.update(ctx, rg, name, armcompute.VirtualMachineUpdate{Properties: &armcompute.VirtualMachineProperties{
			StorageProfile: &armcompute.StorageProfile{OSDisk: &armcompute.OSDisk{DeleteOption: to.Ptr(armcompute.DiskDeleteOptionTypesDelete)}},
		}}, tok)
	})
}

// Delete deletes the VM (its OS disk with it, see model; its NIC stays, to
// be deleted after it).
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
