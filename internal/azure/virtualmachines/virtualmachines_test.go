package virtualmachines_test

import (
	"errors"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

func TestParameters(t *testing.T) {
	vm := func(state string) *armcompute.VirtualMachine {
		return &armcompute.VirtualMachine{Properties: &armcompute.VirtualMachineProperties{ProvisioningState: to.Ptr(state)}}
	}
	for _, tc := range []struct {
		name     string
		made     bool
		existing *armcompute.VirtualMachine
		write    bool
		err      func(error) bool
	}{
		{"missing: created", false, nil, true, nil},
		{"made before and missing: vanished, never made again", true, nil, false, func(err error) bool { return errors.Is(err, virtualmachines.ErrVanished) }},
		{"provisioned: only read", true, vm("Succeeded"), false, nil},
		{"being made: not yet", false, vm("Creating"), false, func(err error) bool { return errors.Is(err, async.ErrNotYet) }},
		{"being updated after it ran (a disk attach): done, only read", true, vm("Updating"), false, nil},
		{"being updated before it ran: not yet", false, vm("Updating"), false, func(err error) bool { return errors.Is(err, async.ErrNotYet) }},
		{"failed after it ran: reported, never written", true, vm("Failed"), false, func(err error) bool { return err != nil && !errors.Is(err, async.ErrNotYet) }},
		{"creation failed: sent again", false, vm("Failed"), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := virtualmachines.Spec{ResourceGroup: "rg", Name: "win-abcde", Location: "westeurope", Size: "Standard_D4s_v3", Windows: true,
				ComputerName: "win-abcde", AdminUsername: "capi", AdminPassword: "p", NICID: "/nic", Made: tc.made}
			body, err := spec.Parameters(tc.existing)
			if tc.err == nil && err != nil || tc.err != nil && !tc.err(err) {
				t.Fatalf("error %v", err)
			}
			if (body != nil) != tc.write {
				t.Fatalf("write %v, want %v", body != nil, tc.write)
			}
			if body == nil {
				return
			}
			// The password is sent once, at creation; a retry leaves it and
			// the custom data to what Azure kept.
			if wantSecrets := tc.existing == nil; (body.Properties.OSProfile.AdminPassword != nil) != wantSecrets || (body.Properties.OSProfile.CustomData != nil) != wantSecrets {
				t.Fatalf("secrets sent %v, want %v", body.Properties.OSProfile.AdminPassword != nil, wantSecrets)
			}
			if body.Properties.OSProfile.AdminPassword != nil && *body.Properties.OSProfile.AdminPassword != "p" || *body.Properties.StorageProfile.OSDisk.OSType != armcompute.OperatingSystemTypesWindows {
				t.Fatalf("body %+v", body.Properties.OSProfile)
			}
		})
	}
}

// A VM of a third-party marketplace image names the image's plan; any
// other image names none.
func TestPlan(t *testing.T) {
	spec := virtualmachines.Spec{ResourceGroup: "rg", Name: "rocky", Location: "westeurope", Size: "Standard_D2s_v3", AdminUsername: "capi", SSHPublicKey: "ssh-ed25519 AAAA", NICID: "/nic",
		Image: virtualmachines.Image{Publisher: "resf", Offer: "rockylinux-x86_64", SKU: "9-base", Version: "9.8.20260525", ThirdParty: true}}
	body, err := spec.Parameters(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := body.Plan; p == nil || *p.Name != "9-base" || *p.Product != "rockylinux-x86_64" || *p.Publisher != "resf" {
		t.Fatalf("plan %+v", body.Plan)
	}
	if d := body.Properties.DiagnosticsProfile; d == nil || d.BootDiagnostics == nil || !*d.BootDiagnostics.Enabled || d.BootDiagnostics.StorageURI != nil {
		t.Fatal("boot diagnostics are not on with managed storage")
	}
	spec.Image.ThirdParty = false
	if body, _ := spec.Parameters(nil); body.Plan != nil {
		t.Fatalf("a first-party image with a plan: %+v", body.Plan)
	}
}
