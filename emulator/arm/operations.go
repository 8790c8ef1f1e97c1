package arm

import (
	"context"
	"net/http"
	"strings"
)

// operationSpec is one REST operation the emulator serves, named and shaped
// as in azure-rest-api-specs (and so in the Azure SDKs generated from it).
// A request that matches no served operation is refused before any handler
// sees it; the conformance test holds every entry to the SDK's declaration
// of the same operation ID.
type operationSpec struct {
	ID     string
	Method string
	// Path is the specification's template; {name} matches one segment.
	Path string
	// Versions names the api-versions the operation's resource type takes.
	Versions string
	// Created and Updated are what a PUT answers when it creates or
	// replaces the resource: the resource provider's choice within what
	// the specification allows (Network and Compute VMs 201 and 200, the
	// Disk RP 202 for both).
	Created, Updated int
	// Sync marks a PATCH that the resource provider applies at once
	// (Network's UpdateTags: not x-ms-long-running-operation in the spec).
	Sync bool
	seg  []string
}

const (
	subRG   = "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}"
	network = subRG + "/providers/Microsoft.Network/"
	compute = subRG + "/providers/Microsoft.Compute/"
	locs    = "/subscriptions/{subscriptionId}/providers/Microsoft.Compute/locations/{location}/"
)

var servedOperations = func() []operationSpec {
	var ops []operationSpec
	add := func(o operationSpec) { ops = append(ops, o) }
	// crud adds a resource's Get, CreateOrUpdate, Delete and the list of
	// its siblings; top-level types also list across the subscription and
	// take tags with a PATCH.
	crud := func(group, versions, path string, topLevel, updateTags bool) {
		add(operationSpec{ID: group + "_Get", Method: http.MethodGet, Path: path, Versions: versions})
		add(operationSpec{ID: group + "_CreateOrUpdate", Method: http.MethodPut, Path: path, Versions: versions})
		add(operationSpec{ID: group + "_Delete", Method: http.MethodDelete, Path: path, Versions: versions})
		parent := path[:strings.LastIndex(path, "/")]
		add(operationSpec{ID: group + "_List", Method: http.MethodGet, Path: parent, Versions: versions})
		if topLevel {
			all := "/subscriptions/{subscriptionId}/providers/" + parent[strings.Index(parent, "/providers/")+len("/providers/"):]
			add(operationSpec{ID: group + "_ListAll", Method: http.MethodGet, Path: all, Versions: versions})
		}
		if updateTags {
			add(operationSpec{ID: group + "_UpdateTags", Method: http.MethodPatch, Path: path, Versions: versions, Sync: true})
		}
	}
	readOnly := func(group, versions, path string) {
		add(operationSpec{ID: group + "_Get", Method: http.MethodGet, Path: path, Versions: versions})
		add(operationSpec{ID: group + "_List", Method: http.MethodGet, Path: path[:strings.LastIndex(path, "/")], Versions: versions})
	}

	// Microsoft.Resources.
	rg := "/subscriptions/{subscriptionId}/resourcegroups/{resourceGroupName}"
	add(operationSpec{ID: "ResourceGroups_Get", Method: http.MethodGet, Path: rg, Versions: "resources"})
	add(operationSpec{ID: "ResourceGroups_CheckExistence", Method: http.MethodHead, Path: rg, Versions: "resources"})
	add(operationSpec{ID: "ResourceGroups_CreateOrUpdate", Method: http.MethodPut, Path: rg, Versions: "resources"})
	add(operationSpec{ID: "ResourceGroups_Update", Method: http.MethodPatch, Path: rg, Versions: "resources", Sync: true})
	add(operationSpec{ID: "ResourceGroups_Delete", Method: http.MethodDelete, Path: rg, Versions: "resources"})
	add(operationSpec{ID: "ResourceGroups_List", Method: http.MethodGet, Path: "/subscriptions/{subscriptionId}/resourcegroups", Versions: "resources"})
	add(operationSpec{ID: "Resources_ListByResourceGroup", Method: http.MethodGet, Path: subRG + "/resources", Versions: "resources"})

	// Microsoft.Network.
	crud("VirtualNetworks", "network", network+"virtualNetworks/{virtualNetworkName}", true, true)
	crud("Subnets", "network", network+"virtualNetworks/{virtualNetworkName}/subnets/{subnetName}", false, false)
	crud("SecurityGroups", "network", network+"networkSecurityGroups/{networkSecurityGroupName}", true, true)
	crud("SecurityRules", "network", network+"networkSecurityGroups/{networkSecurityGroupName}/securityRules/{securityRuleName}", false, false)
	readOnly("DefaultSecurityRules", "network", network+"networkSecurityGroups/{networkSecurityGroupName}/defaultSecurityRules/{defaultSecurityRuleName}")
	crud("RouteTables", "network", network+"routeTables/{routeTableName}", true, true)
	crud("Routes", "network", network+"routeTables/{routeTableName}/routes/{routeName}", false, false)
	crud("NatGateways", "network", network+"natGateways/{natGatewayName}", true, true)
	crud("PublicIPAddresses", "network", network+"publicIPAddresses/{publicIpAddressName}", true, true)
	crud("LoadBalancers", "network", network+"loadBalancers/{loadBalancerName}", true, true)
	crud("InboundNatRules", "network", network+"loadBalancers/{loadBalancerName}/inboundNatRules/{inboundNatRuleName}", false, false)
	crud("LoadBalancerBackendAddressPools", "network", network+"loadBalancers/{loadBalancerName}/backendAddressPools/{backendAddressPoolName}", false, false)
	readOnly("LoadBalancerFrontendIPConfigurations", "network", network+"loadBalancers/{loadBalancerName}/frontendIPConfigurations/{frontendIPConfigurationName}")
	readOnly("LoadBalancerProbes", "network", network+"loadBalancers/{loadBalancerName}/probes/{probeName}")
	readOnly("LoadBalancerLoadBalancingRules", "network", network+"loadBalancers/{loadBalancerName}/loadBalancingRules/{loadBalancingRuleName}")
	crud("Interfaces", "network", network+"networkInterfaces/{networkInterfaceName}", true, true)
	// A scale set's NICs are the Network RP's, under the Compute path, at
	// its own api-versions (2018-10-01 in the SDK).
	vmssNICs := subRG + "/providers/microsoft.Compute/virtualMachineScaleSets/{virtualMachineScaleSetName}"
	add(operationSpec{ID: "Interfaces_ListVirtualMachineScaleSetNetworkInterfaces", Method: http.MethodGet, Path: vmssNICs + "/networkInterfaces", Versions: "vmss-network"})
	add(operationSpec{ID: "Interfaces_ListVirtualMachineScaleSetVMNetworkInterfaces", Method: http.MethodGet, Path: vmssNICs + "/virtualMachines/{virtualmachineIndex}/networkInterfaces", Versions: "vmss-network"})
	add(operationSpec{ID: "Interfaces_GetVirtualMachineScaleSetNetworkInterface", Method: http.MethodGet, Path: vmssNICs + "/virtualMachines/{virtualmachineIndex}/networkInterfaces/{networkInterfaceName}", Versions: "vmss-network"})

	// Microsoft.Compute: virtual machines.
	vm := compute + "virtualMachines/{vmName}"
	crud("VirtualMachines", "compute", vm, true, false)
	add(operationSpec{ID: "VirtualMachines_Update", Method: http.MethodPatch, Path: vm, Versions: "compute"})
	add(operationSpec{ID: "VirtualMachines_InstanceView", Method: http.MethodGet, Path: vm + "/instanceView", Versions: "compute"})
	for _, a := range []string{"Start", "PowerOff", "Deallocate", "Restart", "RunCommand", "RetrieveBootDiagnosticsData"} {
		add(operationSpec{ID: "VirtualMachines_" + a, Method: http.MethodPost, Path: vm + "/" + lowerFirst(a), Versions: "compute"})
	}
	runCommands(add, "VirtualMachineRunCommands", vm+"/runCommands", "_GetByVirtualMachine", "_ListByVirtualMachine")

	// Availability sets: written and deleted within the request (the spec
	// answers 200 to a PUT that creates, and 200 or 204 to a DELETE).
	as := compute + "availabilitySets/{availabilitySetName}"
	add(operationSpec{ID: "AvailabilitySets_Get", Method: http.MethodGet, Path: as, Versions: "compute"})
	add(operationSpec{ID: "AvailabilitySets_CreateOrUpdate", Method: http.MethodPut, Path: as, Versions: "compute", Created: http.StatusOK})
	add(operationSpec{ID: "AvailabilitySets_Delete", Method: http.MethodDelete, Path: as, Versions: "compute"})
	add(operationSpec{ID: "AvailabilitySets_List", Method: http.MethodGet, Path: compute + "availabilitySets", Versions: "compute"})
	add(operationSpec{ID: "AvailabilitySets_ListBySubscription", Method: http.MethodGet, Path: "/subscriptions/{subscriptionId}/providers/Microsoft.Compute/availabilitySets", Versions: "compute"})

	// Scale sets and their instances.
	ss := compute + "virtualMachineScaleSets/{vmScaleSetName}"
	crud("VirtualMachineScaleSets", "compute", ss, true, false)
	add(operationSpec{ID: "VirtualMachineScaleSets_Update", Method: http.MethodPatch, Path: ss, Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineScaleSets_DeleteInstances", Method: http.MethodPost, Path: ss + "/delete", Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineScaleSets_GetInstanceView", Method: http.MethodGet, Path: ss + "/instanceView", Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineScaleSets_UpdateInstances", Method: http.MethodPost, Path: ss + "/manualupgrade", Versions: "compute"})
	for _, a := range []string{"Start", "Deallocate", "Restart"} {
		add(operationSpec{ID: "VirtualMachineScaleSets_" + a, Method: http.MethodPost, Path: ss + "/" + lowerFirst(a), Versions: "compute"})
	}
	add(operationSpec{ID: "VirtualMachineScaleSets_PowerOff", Method: http.MethodPost, Path: ss + "/poweroff", Versions: "compute"})
	inst := ss + "/virtualMachines/{instanceId}"
	add(operationSpec{ID: "VirtualMachineScaleSetVMs_Get", Method: http.MethodGet, Path: inst, Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineScaleSetVMs_Update", Method: http.MethodPut, Path: inst, Versions: "compute", Created: http.StatusAccepted, Updated: http.StatusAccepted})
	add(operationSpec{ID: "VirtualMachineScaleSetVMs_Delete", Method: http.MethodDelete, Path: inst, Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineScaleSetVMs_GetInstanceView", Method: http.MethodGet, Path: inst + "/instanceView", Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineScaleSetVMs_List", Method: http.MethodGet, Path: compute + "virtualMachineScaleSets/{virtualMachineScaleSetName}/virtualMachines", Versions: "compute"})
	for _, a := range []string{"Start", "PowerOff", "Deallocate", "Restart", "RunCommand", "RetrieveBootDiagnosticsData"} {
		add(operationSpec{ID: "VirtualMachineScaleSetVMs_" + a, Method: http.MethodPost, Path: inst + "/" + lowerFirst(a), Versions: "compute"})
	}
	runCommands(add, "VirtualMachineScaleSetVMRunCommands", inst+"/runCommands", "_Get", "_List")

	// Disks (the Disk RP) and images.
	disk := compute + "disks/{diskName}"
	add(operationSpec{ID: "Disks_Get", Method: http.MethodGet, Path: disk, Versions: "disks"})
	add(operationSpec{ID: "Disks_CreateOrUpdate", Method: http.MethodPut, Path: disk, Versions: "disks", Created: http.StatusAccepted, Updated: http.StatusAccepted})
	add(operationSpec{ID: "Disks_Update", Method: http.MethodPatch, Path: disk, Versions: "disks"})
	add(operationSpec{ID: "Disks_Delete", Method: http.MethodDelete, Path: disk, Versions: "disks"})
	add(operationSpec{ID: "Disks_ListByResourceGroup", Method: http.MethodGet, Path: compute + "disks", Versions: "disks"})
	add(operationSpec{ID: "Disks_List", Method: http.MethodGet, Path: "/subscriptions/{subscriptionId}/providers/Microsoft.Compute/disks", Versions: "disks"})
	img := compute + "images/{imageName}"
	add(operationSpec{ID: "Images_Get", Method: http.MethodGet, Path: img, Versions: "compute"})
	add(operationSpec{ID: "Images_CreateOrUpdate", Method: http.MethodPut, Path: img, Versions: "compute"})
	add(operationSpec{ID: "Images_Update", Method: http.MethodPatch, Path: img, Versions: "compute"})
	add(operationSpec{ID: "Images_Delete", Method: http.MethodDelete, Path: img, Versions: "compute"})
	add(operationSpec{ID: "Images_ListByResourceGroup", Method: http.MethodGet, Path: compute + "images", Versions: "compute"})
	add(operationSpec{ID: "Images_List", Method: http.MethodGet, Path: "/subscriptions/{subscriptionId}/providers/Microsoft.Compute/images", Versions: "compute"})

	// The marketplace and community galleries, and resource SKUs.
	pub := locs + "publishers"
	add(operationSpec{ID: "VirtualMachineImages_ListPublishers", Method: http.MethodGet, Path: pub, Versions: "compute"})
	offers := pub + "/{publisherName}/artifacttypes/vmimage/offers"
	add(operationSpec{ID: "VirtualMachineImages_ListOffers", Method: http.MethodGet, Path: offers, Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineImages_ListSKUs", Method: http.MethodGet, Path: offers + "/{offer}/skus", Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineImages_List", Method: http.MethodGet, Path: offers + "/{offer}/skus/{skus}/versions", Versions: "compute"})
	add(operationSpec{ID: "VirtualMachineImages_Get", Method: http.MethodGet, Path: offers + "/{offer}/skus/{skus}/versions/{version}", Versions: "compute"})
	cg := locs + "communityGalleries/{publicGalleryName}"
	add(operationSpec{ID: "CommunityGalleries_Get", Method: http.MethodGet, Path: cg, Versions: "galleries"})
	add(operationSpec{ID: "CommunityGalleryImages_List", Method: http.MethodGet, Path: cg + "/images", Versions: "galleries"})
	add(operationSpec{ID: "CommunityGalleryImages_Get", Method: http.MethodGet, Path: cg + "/images/{galleryImageName}", Versions: "galleries"})
	add(operationSpec{ID: "CommunityGalleryImageVersions_List", Method: http.MethodGet, Path: cg + "/images/{galleryImageName}/versions", Versions: "galleries"})
	add(operationSpec{ID: "CommunityGalleryImageVersions_Get", Method: http.MethodGet, Path: cg + "/images/{galleryImageName}/versions/{galleryImageVersionName}", Versions: "galleries"})
	add(operationSpec{ID: "ResourceSKUs_List", Method: http.MethodGet, Path: "/subscriptions/{subscriptionId}/providers/Microsoft.Compute/skus", Versions: "skus"})

	// Microsoft.ManagedIdentity: user-assigned identities, written and
	// deleted within the request (armmsi v1.3.0: CreateOrUpdate 200/201,
	// Delete 200/204, neither long-running).
	uai := subRG + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities"
	add(operationSpec{ID: "UserAssignedIdentities_Get", Method: http.MethodGet, Path: uai + "/{resourceName}", Versions: "msi"})
	add(operationSpec{ID: "UserAssignedIdentities_CreateOrUpdate", Method: http.MethodPut, Path: uai + "/{resourceName}", Versions: "msi"})
	add(operationSpec{ID: "UserAssignedIdentities_Delete", Method: http.MethodDelete, Path: uai + "/{resourceName}", Versions: "msi"})
	add(operationSpec{ID: "UserAssignedIdentities_ListByResourceGroup", Method: http.MethodGet, Path: uai, Versions: "msi"})

	// Microsoft.Authorization at any scope (armauthorization/v2 v2.2.0):
	// {scope} stands for a subscription, a resource group or a resource.
	ra := "/{scope}/providers/Microsoft.Authorization/roleAssignments"
	add(operationSpec{ID: "RoleAssignments_Create", Method: http.MethodPut, Path: ra + "/{roleAssignmentName}", Versions: "authorization"})
	add(operationSpec{ID: "RoleAssignments_Get", Method: http.MethodGet, Path: ra + "/{roleAssignmentName}", Versions: "authorization"})
	add(operationSpec{ID: "RoleAssignments_Delete", Method: http.MethodDelete, Path: ra + "/{roleAssignmentName}", Versions: "authorization"})
	add(operationSpec{ID: "RoleAssignments_ListForScope", Method: http.MethodGet, Path: ra, Versions: "authorization"})
	rd := "/{scope}/providers/Microsoft.Authorization/roleDefinitions"
	add(operationSpec{ID: "RoleDefinitions_Get", Method: http.MethodGet, Path: rd + "/{roleDefinitionId}", Versions: "authorization"})
	add(operationSpec{ID: "RoleDefinitions_List", Method: http.MethodGet, Path: rd, Versions: "authorization"})

	// Microsoft.Resources/tags at a resource group's or a resource's scope
	// (armresources v1.2.0 TagsClient): what CAPZ's tags service reads and
	// merges into (azure/services/tags, kubernetes-sigs/cluster-api-provider-azure
	// 69ec3a40). Neither is a long-running operation.
	tagsAt := "/{scope}/providers/Microsoft.Resources/tags/default"
	add(operationSpec{ID: "Tags_GetAtScope", Method: http.MethodGet, Path: tagsAt, Versions: "resources"})
	add(operationSpec{ID: "Tags_UpdateAtScope", Method: http.MethodPatch, Path: tagsAt, Versions: "resources", Sync: true})

	for i := range ops {
		ops[i].seg = strings.Split(strings.Trim(ops[i].Path, "/"), "/")
		if ops[i].Created == 0 {
			ops[i].Created = http.StatusCreated
		}
		if ops[i].Updated == 0 {
			ops[i].Updated = http.StatusOK
		}
	}
	return ops
}()

// runCommands adds a machine's managed run commands: CreateOrUpdate,
// Update (a PATCH run as a PUT of the merged resource), Delete, and the
// Get and List that the VM and scale-set clients name differently.
func runCommands(add func(operationSpec), group, collection, get, list string) {
	one := collection + "/{runCommandName}"
	add(operationSpec{ID: group + "_CreateOrUpdate", Method: http.MethodPut, Path: one, Versions: "compute"})
	add(operationSpec{ID: group + "_Update", Method: http.MethodPatch, Path: one, Versions: "compute"})
	add(operationSpec{ID: group + "_Delete", Method: http.MethodDelete, Path: one, Versions: "compute"})
	add(operationSpec{ID: group + get, Method: http.MethodGet, Path: one, Versions: "compute"})
	add(operationSpec{ID: group + list, Method: http.MethodGet, Path: collection, Versions: "compute"})
}

func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }

// isScope reports whether segments name an RBAC scope: subscriptions/S,
// with resourceGroups/G, with providers/NS/type/name... after it.
func isScope(seg []string) bool {
	switch {
	case len(seg) < 2 || !strings.EqualFold(seg[0], "subscriptions") || seg[1] == "":
		return false
	case len(seg) == 2:
		return true
	case len(seg) < 4 || !strings.EqualFold(seg[2], "resourceGroups") || seg[3] == "":
		return false
	case len(seg) == 4:
		return true
	}
	// providers/NS/type/name[/type/name...], never the Authorization
	// provider's own collections.
	rest := seg[4:]
	return len(rest) >= 4 && len(rest)%2 == 0 && strings.EqualFold(rest[0], "providers") && !strings.EqualFold(rest[1], "Microsoft.Authorization")
}

// matchOperation finds the served operation for a request. The literal
// segments compare without case, as ARM's routing does. A leading {scope}
// takes any number of segments that name a scope: a subscription, a
// resource group, or a resource in one.
func matchOperation(method, path string) *operationSpec {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	for i := range servedOperations {
		op := &servedOperations[i]
		if op.Method != method {
			continue
		}
		opSeg, pathSeg := op.seg, seg
		if op.seg[0] == "{scope}" {
			n := len(seg) - (len(op.seg) - 1)
			if n < 2 || !isScope(seg[:n]) {
				continue
			}
			opSeg, pathSeg = op.seg[1:], seg[n:]
		}
		if len(opSeg) != len(pathSeg) {
			continue
		}
		ok := true
		for j, t := range opSeg {
			if strings.HasPrefix(t, "{") {
				ok = pathSeg[j] != ""
			} else {
				ok = strings.EqualFold(t, pathSeg[j])
			}
			if !ok {
				break
			}
		}
		if ok {
			return op
		}
	}
	return nil
}

// unservedError is ARM's answer to a request no served operation matches:
// an unknown resource type is InvalidResourceType, a known path with
// another method MethodNotAllowed, anything else NotFound.
func unservedError(method, path string) *armError {
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodPost, http.MethodHead} {
		if m != method && matchOperation(m, path) != nil {
			return errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "The requested resource does not support http method '%s'.", method)
		}
	}
	if id, ok := parseResourcePath(path); ok && kinds[strings.ToLower(id.Kind())] == nil && !id.IsCollection() {
		return errorf(http.StatusBadRequest, "InvalidResourceType", "The resource type '%s' could not be found in the namespace '%s'.", strings.Join(id.Types, "/"), id.Namespace)
	}
	return errorf(http.StatusNotFound, "NotFound", "No HTTP resource was found that matches the request URI '%s'.", path)
}

type opKey struct{}

func withOperation(r *http.Request, op *operationSpec) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), opKey{}, op))
}

// operationOf is the served operation a request matched.
func operationOf(r *http.Request) *operationSpec {
	op, _ := r.Context().Value(opKey{}).(*operationSpec)
	if op == nil {
		return &operationSpec{Created: http.StatusCreated, Updated: http.StatusOK}
	}
	return op
}

// isOperationURL reports a long-running operation's status or result URL,
// which the emulator hands out in Azure-AsyncOperation and Location headers:
// it is not a specification operation of its own.
func isOperationURL(path string) bool {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	return len(seg) == 8 && strings.EqualFold(seg[2], "providers") && strings.EqualFold(seg[4], "locations") &&
		(strings.EqualFold(seg[6], "operations") || strings.EqualFold(seg[6], "operationResults"))
}
