package controllers

import (
	"encoding/base64"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/resourceskus"
	"github.com/winkube/winkube/internal/azure/scalesets"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

// The scale set a pool asks for follows from its spec and what the reconcile
// read alone: table cases for what the spec sets, what it leaves to the size
// or to the scale set as it is, and what it must refuse.
func TestScaleSetSpec(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("ssh-ed25519 AAAAC3Nza pool\n"))
	cluster := infrav1.AzureClusterSpec{Location: "westeurope", SubscriptionID: "sub"}
	n := clusterNames{rg: "rg", vnetRG: "netrg", vnet: "vnet", nodeSubnet: infrav1.SubnetSpec{Name: "nodes"}}
	img := virtualmachines.Image{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2404-gen1", Version: "136.3.1"}
	owned := map[string]*string{"owner": ptr.To("c")}
	accelerated := &armcompute.VirtualMachineScaleSet{Properties: &armcompute.VirtualMachineScaleSetProperties{
		VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{NetworkProfile: &armcompute.VirtualMachineScaleSetNetworkProfile{
			NetworkInterfaceConfigurations: []*armcompute.VirtualMachineScaleSetNetworkConfiguration{{
				Properties: &armcompute.VirtualMachineScaleSetNetworkConfigurationProperties{EnableAcceleratedNetworking: ptr.To(true)}}}}}}}
	plain := &armcompute.VirtualMachineScaleSet{}
	for _, c := range []struct {
		name        string
		pool        string
		spec        infrav1.AzureVMSpec
		annotations map[string]string
		size        resourceskus.Size
		cur         *armcompute.VirtualMachineScaleSet
		check       func(s scalesets.Spec) string
		wantErr     string
	}{
		{name: "linux defaults", pool: "pool0", spec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3", SSHPublicKey: key}, check: func(s scalesets.Spec) string {
			switch {
			case s.Windows || s.OSDiskSizeGB != 128 || s.SSHPublicKey != "ssh-ed25519 AAAAC3Nza pool" || s.AdminUsername != AdminUsername || s.AdminPassword != "":
				return "want a Linux pool with a 128 GB OS disk, the trimmed key, the capi user and no password"
			case s.SubnetID != "/subscriptions/sub/resourceGroups/netrg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes":
				return "subnet ID " + s.SubnetID
			case s.ResourceGroup != "rg" || s.Name != "pool0" || s.ComputerNamePrefix != "pool0" || s.Location != "westeurope" || s.Size != "Standard_D2s_v3":
				return "group, name, prefix, location or size not from the inputs"
			case s.Image != img || s.Tags["owner"] == nil || string(s.CustomData) != "data" || len(s.Zones) != 1 || s.Zones[0] != "1":
				return "image, tags, custom data or zones not from the inputs"
			case s.Accelerated || s.Identity != "" || s.LastAppliedTags != nil:
				return "want no accelerated networking, no identity and no recorded tags"
			}
			return ""
		}},
		{name: "windows: shortened prefix, no key, password left to the caller", pool: "windowspool", spec: infrav1.AzureVMSpec{OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}, check: func(s scalesets.Spec) string {
			if !s.Windows || s.SSHPublicKey != "" || s.AdminPassword != "" || len(s.ComputerNamePrefix) > 9 || s.ComputerNamePrefix == "windowspool" {
				return "want a Windows pool with a prefix of at most nine characters, without key or password"
			}
			return ""
		}},
		{name: "OS disk as asked", pool: "p", spec: infrav1.AzureVMSpec{SSHPublicKey: key, OSDisk: infrav1.OSDisk{DiskSizeGB: ptr.To[int32](256), CachingType: "ReadOnly",
			ManagedDisk: &infrav1.ManagedDiskParameters{StorageAccountType: "StandardSSD_LRS"}}}, check: func(s scalesets.Spec) string {
			if s.OSDiskSizeGB != 256 || s.Caching != "ReadOnly" || s.StorageAccountType != "StandardSSD_LRS" {
				return "OS disk not as the spec asks"
			}
			return ""
		}},
		{name: "unset accelerated networking follows the size for a new scale set", pool: "p", spec: infrav1.AzureVMSpec{SSHPublicKey: key},
			size: resourceskus.Size{AcceleratedNetworking: true}, check: func(s scalesets.Spec) string {
				if !s.Accelerated {
					return "want the size's accelerated networking"
				}
				return ""
			}},
		{name: "unset accelerated networking keeps the existing scale set's", pool: "p", spec: infrav1.AzureVMSpec{SSHPublicKey: key},
			size: resourceskus.Size{AcceleratedNetworking: true}, cur: plain, check: func(s scalesets.Spec) string {
				if s.Accelerated {
					return "want the existing scale set's (off), not the size's"
				}
				return ""
			}},
		{name: "unset accelerated networking keeps it on where the scale set has it", pool: "p", spec: infrav1.AzureVMSpec{SSHPublicKey: key},
			cur: accelerated, check: func(s scalesets.Spec) string {
				if !s.Accelerated {
					return "want the existing scale set's (on)"
				}
				return ""
			}},
		{name: "accelerated networking set by the spec wins", pool: "p", spec: infrav1.AzureVMSpec{SSHPublicKey: key, AcceleratedNetworking: ptr.To(false)},
			size: resourceskus.Size{AcceleratedNetworking: true}, cur: accelerated, check: func(s scalesets.Spec) string {
				if s.Accelerated {
					return "want the spec's false"
				}
				return ""
			}},
		{name: "system-assigned identity and recorded tags", pool: "p", spec: infrav1.AzureVMSpec{SSHPublicKey: key, Identity: infrav1.VMIdentitySystemAssigned},
			annotations: map[string]string{tags.LastAppliedAnnotation: `{"team":"a"}`}, check: func(s scalesets.Spec) string {
				if s.Identity != "SystemAssigned" || s.LastAppliedTags["team"] != "a" {
					return "want the system-assigned identity and the recorded tags"
				}
				return ""
			}},
		{name: "a key that is not base64", pool: "p", spec: infrav1.AzureVMSpec{SSHPublicKey: "ssh-ed25519 AAAA"}, wantErr: "spec.template.sshPublicKey is not a base64-encoded OpenSSH key"},
		{name: "no key for Linux", pool: "p", spec: infrav1.AzureVMSpec{}, wantErr: "spec.template.sshPublicKey"},
	} {
		amp := &infrav1.AzureMachinePool{ObjectMeta: metav1.ObjectMeta{Name: c.pool, Annotations: c.annotations}, Spec: infrav1.AzureMachinePoolSpec{Template: c.spec}}
		got, err := scaleSetSpec(amp, cluster, n, img, []byte("data"), owned, []string{"1"}, c.size, c.cur)
		checkSpec(t, c.name, got, err, c.wantErr, c.check)
	}
}
