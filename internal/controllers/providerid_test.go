package controllers_test

import (
	"strings"
	"testing"
	"time"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// TestProviderIDsAsTheCloudProviderWritesThem: in a resource group with
// capitals (which ARM keeps in the IDs it returns), the provider IDs of a VM
// and of a pool's instances have the group in lower case, as
// cloud-provider-azure writes node.spec.providerID; Cluster API matches
// the two by exact string.
func TestProviderIDsAsTheCloudProviderWritesThem(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	f := newCluster(t, "caps", func(s *infrav1.AzureClusterSpec) {
		s.ResourceGroup = "Caps-" + strings.TrimPrefix(s.ResourceGroup, "caps-")
	})
	f.waitClusterProvisioned(time.Minute)
	group := strings.ToLower(f.ac.Spec.ResourceGroup)
	prefix := "azure:///subscriptions/" + subscription + "/resourceGroups/" + group + "/providers/Microsoft.Compute/"

	f.newMachine("caps-md-linux-abcde", false, false, "1")
	am := f.waitMachinesProvisioned(time.Minute, "caps-md-linux-abcde")["caps-md-linux-abcde"]
	if want := prefix + "virtualMachines/caps-md-linux-abcde"; am.Spec.ProviderID != want {
		t.Errorf("VM provider ID %q, want %q", am.Spec.ProviderID, want)
	}

	_, amp := f.newPool("caps-pool", 1, false)
	f.waitPool(amp, 1)
	if want := prefix + "virtualMachineScaleSets/caps-pool/virtualMachines/"; !strings.HasPrefix(amp.Spec.ProviderIDList[0], want) {
		t.Errorf("pool providerIDList %v, want IDs starting %q", amp.Spec.ProviderIDList, want)
	}
	for _, m := range f.poolMachines("caps-pool") {
		if want := prefix + "virtualMachineScaleSets/caps-pool/virtualMachines/" + m.Spec.InstanceID; m.Spec.ProviderID != want {
			t.Errorf("pool machine %s provider ID %q, want %q", m.Name, m.Spec.ProviderID, want)
		}
	}
}
