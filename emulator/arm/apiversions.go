package arm

import (
	"net/http"
	"slices"
	"strings"
)

// apiVersions are the api-versions each resource provider's service takes:
// the stable versions published in Azure/azure-rest-api-specs. ARM refuses
// any other before the resource provider sees the request, so a client
// pinned to a version Azure does not have fails here as it would there.
//
// Sources: Microsoft.Network/stable/<version> folders (to 2023-02-01 as
// listed by Azure/bicep-types-az generated/network, which is generated from
// the specs; 2023-04-01 to 2025-07-01 read in the specs themselves, e.g.
// 2025-01-01 @7b5589f2, 2025-07-01 network.json @445fcb88); Compute's
// ComputeRP, DiskRP, GalleryRP and Skus folders (bicep-types-az
// generated/compute, armcompute v7.3.0 generated from specs @ccea12be);
// 2025-11-01 is the ComputeRP version of the JavaScript SDK's
// @azure/arm-compute (sdk/compute/arm-compute/src/api/virtualMachines/
// operations.ts @0045e90a); Microsoft.Resources, the list ARM itself gives
// for resourceGroups (quoted in Azure/azure-cli#28038, previews left out).
// The scale-set NIC operations are the Network provider's under a Compute
// path and are served at the versions armnetwork calls them with.
var apiVersions = map[string][]string{
	"resources": {"2015-01-01", "2015-11-01", "2016-02-01", "2016-06-01", "2016-07-01", "2016-09-01", "2017-05-10",
		"2017-06-01", "2017-08-01", "2017-12-01", "2018-01-01", "2018-02-01", "2018-05-01", "2018-06-01", "2018-07-01",
		"2018-08-01", "2018-09-01", "2018-11-01", "2019-03-01", "2019-05-01", "2019-05-10", "2019-06-01", "2019-07-01",
		"2019-08-01", "2019-09-01", "2019-10-01", "2019-11-01", "2020-01-01", "2020-05-01", "2020-06-01", "2020-07-01",
		"2020-08-01", "2020-09-01", "2020-10-01", "2021-01-01", "2021-04-01", "2022-01-01", "2022-05-01", "2022-06-01",
		"2022-09-01", "2022-12-01", "2023-07-01"},
	"network": {"2015-06-15", "2016-03-30", "2016-06-01", "2016-09-01", "2016-12-01", "2017-03-01", "2017-03-30",
		"2017-06-01", "2017-08-01", "2017-09-01", "2017-10-01", "2017-11-01", "2018-01-01", "2018-02-01", "2018-04-01",
		"2018-06-01", "2018-07-01", "2018-08-01", "2018-10-01", "2018-11-01", "2018-12-01", "2019-02-01", "2019-04-01",
		"2019-06-01", "2019-07-01", "2019-08-01", "2019-09-01", "2019-11-01", "2019-12-01", "2020-03-01", "2020-04-01",
		"2020-05-01", "2020-06-01", "2020-07-01", "2020-08-01", "2020-11-01", "2021-02-01", "2021-03-01", "2021-05-01",
		"2021-08-01", "2022-01-01", "2022-05-01", "2022-07-01", "2022-09-01", "2022-11-01", "2023-02-01", "2023-04-01",
		"2023-05-01", "2023-06-01", "2023-09-01", "2023-11-01", "2024-01-01", "2024-03-01", "2024-05-01", "2024-07-01",
		"2024-10-01", "2025-01-01", "2025-03-01", "2025-05-01", "2025-07-01"},
	"vmss-network": {"2017-03-30", "2018-10-01"},
	"compute": {"2015-06-15", "2016-03-30", "2017-03-30", "2017-12-01", "2018-04-01", "2018-06-01", "2018-10-01",
		"2019-03-01", "2019-07-01", "2019-12-01", "2020-06-01", "2020-12-01", "2021-03-01", "2021-04-01", "2021-07-01",
		"2021-11-01", "2022-03-01", "2022-08-01", "2022-11-01", "2023-03-01", "2023-07-01", "2023-09-01", "2024-03-01",
		"2024-07-01", "2024-11-01", "2025-04-01", "2025-11-01"},
	"disks": {"2017-03-30", "2018-04-01", "2018-06-01", "2018-09-30", "2019-03-01", "2019-07-01", "2019-11-01",
		"2020-05-01", "2020-06-30", "2020-09-30", "2020-12-01", "2021-04-01", "2021-08-01", "2021-12-01", "2022-03-02",
		"2022-07-02", "2023-01-02", "2023-04-02", "2023-10-02", "2024-03-02", "2025-01-02"},
	// Community galleries exist from 2022-03-03 on.
	"galleries": {"2022-03-03", "2022-08-03", "2023-07-03", "2024-03-03", "2025-03-03"},
	"skus":      {"2017-09-01", "2019-04-01", "2021-07-01"},
	// Microsoft.ManagedIdentity's stable versions: the folders 2018-11-30
	// and 2023-01-31 of specification/msi/resource-manager and 2024-11-30,
	// which armmsi v1.3.0 is generated from (previews left out).
	"msi": {"2018-11-30", "2023-01-31", "2024-11-30"},
	// Microsoft.Authorization's roleAssignments and roleDefinitions:
	// specification/authorization/resource-manager/Microsoft.Authorization/
	// stable/2015-07-01, 2022-03-01 and 2022-04-01 (authorization-
	// RoleAssignmentsCalls.json, authorization-RoleDefinitionsCalls.json);
	// armauthorization/v2 v2.2.0 calls 2022-04-01.
	"authorization": {"2015-07-01", "2022-03-01", "2022-04-01"},
}

// checkAPIVersion refuses a version the operation's type does not take,
// with ARM's two answers: InvalidApiVersionParameter for Microsoft.Resources
// (Azure/azure-cli#28038) and NoRegisteredProviderFound for a resource
// provider's types (Azure/azure-cli#28496), both 400.
func checkAPIVersion(op *operationSpec, v string) *armError {
	supported := apiVersions[op.Versions]
	if slices.Contains(supported, v) {
		return nil
	}
	newestFirst := slices.Clone(supported)
	slices.Reverse(newestFirst)
	if op.Versions == "resources" {
		return errorf(http.StatusBadRequest, "InvalidApiVersionParameter", "The api-version '%s' is invalid. The supported versions are '%s'.", v, strings.Join(newestFirst, ", "))
	}
	return errorf(http.StatusBadRequest, "NoRegisteredProviderFound",
		"No registered resource provider found for location '%s' and API version '%s' for type '%s'. The supported api-versions are '%s'. The supported locations are '%s'.",
		"*", v, op.resourceType(), strings.Join(newestFirst, ", "), locationNames())
}

// resourceType is the type an operation's path names last, for messages.
func (op *operationSpec) resourceType() string {
	for i := len(op.seg) - 1; i >= 0; i-- {
		if !strings.HasPrefix(op.seg[i], "{") {
			return op.seg[i]
		}
	}
	return ""
}
