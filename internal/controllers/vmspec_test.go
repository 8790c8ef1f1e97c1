package controllers

import (
	"encoding/base64"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

// The VM a machine asks for follows from its spec alone: table cases for
// what the spec sets and what it leaves to defaults.
func TestVMSpec(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("ssh-ed25519 AAAAC3Nza test\n"))
	cluster := infrav1.AzureClusterSpec{Location: "westeurope", SubscriptionID: "sub"}
	img := virtualmachines.Image{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2404-gen1", Version: "136.3.1"}
	tags := map[string]*string{"owner": ptr.To("c")}
	uami := "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/cp"
	for _, c := range []struct {
		name    string
		spec    infrav1.AzureVMSpec
		made    bool
		zone    string
		avSet   string
		check   func(virtualmachines.Spec) string
		wantErr string
	}{
		{name: "linux defaults", spec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3", SSHPublicKey: key}, zone: "2", check: func(s virtualmachines.Spec) string {
			switch {
			case s.Windows || s.OSDiskSizeGB != 128 || s.SSHPublicKey != "ssh-ed25519 AAAAC3Nza test" || s.AdminUsername != AdminUsername:
				return "want a Linux VM with a 128 GB OS disk, the trimmed key and the capi user"
			case s.Zone != "2" || s.AvailabilitySetID != "" || s.Made || s.Identity != "":
				return "want zone 2, no set, not made, no identity"
			case s.NICID != "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/vm-nic":
				return "NIC ID " + s.NICID
			case s.Location != "westeurope" || s.Size != "Standard_D2s_v3" || s.ComputerName != "vm" || s.Image != img || s.Tags["owner"] == nil:
				return "location, size, computer name, image or tags not from the inputs"
			}
			return ""
		}},
		{name: "windows takes no key", spec: infrav1.AzureVMSpec{OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}, check: func(s virtualmachines.Spec) string {
			if !s.Windows || s.SSHPublicKey != "" || s.AdminPassword != "" {
				return "want a Windows VM without key or password (the caller's)"
			}
			return ""
		}},
		{name: "OS disk as asked", spec: infrav1.AzureVMSpec{SSHPublicKey: key, OSDisk: infrav1.OSDisk{DiskSizeGB: ptr.To[int32](256), CachingType: "ReadOnly",
			ManagedDisk: &infrav1.ManagedDiskParameters{StorageAccountType: "StandardSSD_LRS"}}}, check: func(s virtualmachines.Spec) string {
			if s.OSDiskSizeGB != 256 || s.Caching != "ReadOnly" || s.StorageAccountType != "StandardSSD_LRS" {
				return "OS disk not as the spec asks"
			}
			return ""
		}},
		{name: "availability set, made", spec: infrav1.AzureVMSpec{SSHPublicKey: key}, made: true, avSet: "/set", check: func(s virtualmachines.Spec) string {
			if s.AvailabilitySetID != "/set" || s.Zone != "" || !s.Made {
				return "want the set, no zone, made"
			}
			return ""
		}},
		{name: "user-assigned identity", spec: infrav1.AzureVMSpec{SSHPublicKey: key, Identity: infrav1.VMIdentityUserAssigned,
			UserAssignedIdentities: []infrav1.UserAssignedIdentity{{ProviderID: "azure://" + uami}}}, check: func(s virtualmachines.Spec) string {
			if s.Identity != "UserAssigned" || len(s.UserAssigned) != 1 || !strings.EqualFold(s.UserAssigned[0], uami) {
				return "identity not the user-assigned one"
			}
			return ""
		}},
		{name: "a key that is not base64", spec: infrav1.AzureVMSpec{SSHPublicKey: "ssh-ed25519 AAAA"}, wantErr: "spec.sshPublicKey is not a base64-encoded OpenSSH key"},
		{name: "no key for Linux", spec: infrav1.AzureVMSpec{}, wantErr: "spec.sshPublicKey"},
	} {
		am := &infrav1.AzureMachine{Spec: infrav1.AzureMachineSpec{AzureVMSpec: c.spec}}
		if c.made {
			am.Spec.ProviderID = "azure:///subscriptions/sub/resourcegroups/rg/providers/Microsoft.Compute/virtualMachines/vm"
		}
		got, err := vmSpec(am, cluster, "rg", "vm", "vm-nic", c.zone, img, []byte("data"), tags, c.avSet)
		checkSpec(t, c.name, got, err, c.wantErr, c.check)
	}
}

// checkSpec checks one case of a spec builder's table: the error it wants,
// or what check finds wrong in the spec built.
func checkSpec[S any](t *testing.T, name string, got S, err error, wantErr string, check func(S) string) {
	t.Helper()
	switch {
	case wantErr != "":
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want %q", name, err, wantErr)
		}
	case err != nil:
		t.Errorf("%s: %v", name, err)
	default:
		if msg := check(got); msg != "" {
			t.Errorf("%s: %s: %+v", name, msg, got)
		}
	}
}
