// Package providerid writes a VM's or scale-set instance's provider ID the
// way cloud-provider-azure writes node.spec.providerID, which Cluster API
// matches to Machines (and a MachinePool's providerIDList) by exact string.
package providerid

import "strings"

// Prefix is the scheme cloud-provider-azure gives its provider IDs.
const Prefix = "azure://"

// FromARMID is the provider ID of the VM or scale-set instance with this ARM
// ID: azure:// and the ID with its resource group in lower case.
//
// cloud-provider-azure lower-cases the resource group of every provider ID
// it writes: from the ARM ID (ConvertResourceGroupNameToLower in
// pkg/provider/azure_wrap.go, used by GetInstanceIDByNodeName in
// azure_standard.go and azure_vmss.go) and from the instance metadata
// (getLocalInstanceProviderID in azure_instances.go, which also lower-cases
// the subscription). ARM echoes a group's name with the capitals it was
// created with, so "azure://" + vm.ID names no Node once the group has one.
// CAPZ writes it the same way (cloud-provider-azure's function, in
// azure/services/virtualmachines/virtualmachines.go and
// azure/services/scalesets/scalesets.go; CAPZ #2533, #2817).
func FromARMID(id string) string {
	return Prefix + lowerGroup(id)
}

// Normalize rewrites a provider ID written with the group as ARM spelled it
// (winkube before it lower-cased groups) as cloud-provider-azure writes it.
// Anything that is not an Azure provider ID is returned unchanged.
func Normalize(providerID string) string {
	id, ok := strings.CutPrefix(providerID, Prefix)
	if !ok {
		return providerID
	}
	return FromARMID(id)
}

// lowerGroup lower-cases the segment after resourceGroups; the rest of the
// ID keeps its case, as cloud-provider-azure keeps it.
func lowerGroup(id string) string {
	parts := strings.Split(id, "/")
	for i := 0; i+1 < len(parts); i++ {
		if strings.EqualFold(parts[i], "resourceGroups") {
			parts[i+1] = strings.ToLower(parts[i+1])
			break
		}
	}
	return strings.Join(parts, "/")
}
