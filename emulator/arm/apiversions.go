package arm

import (
	"log"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// apiVersions are the api-versions each resource provider's service takes:
// the versions published in Azure/azure-rest-api-specs, and the previews
// ARM still lists for the type. ARM refuses any other before the resource
// provider sees the request, so a client pinned to a version Azure does
// not have fails here as it would there. A version newer than all of these
// is the exception (servedAPIVersion): the emulator cannot know it yet, and
// a client released after this list is served rather than refused.
//
// Sources: Microsoft.Network/stable/<version> folders (to 2023-02-01 as
// listed by Azure/bicep-types-az generated/network, which is generated from
// the specs; 2023-04-01 to 2025-07-01 read in the specs themselves, e.g.
// 2025-01-01 @7b5589f2, 2025-07-01 network.json @445fcb88; 2026-01-01
// network.json @c32f85eb, the version of @azure/arm-network 39.0.0;
// armnetwork v9.0.0 calls 2025-05-01); the previews 2014-12-01-preview and
// 2015-05-01-preview are those ARM lists for networkInterfaces
// (Azure/azure-cli#28496). Compute's ComputeRP, DiskRP, GalleryRP and Skus
// folders (bicep-types-az generated/compute, armcompute v7.3.0 generated
// from specs @ccea12be; ComputeRP/stable/2026-03-01 @d653a476; 2026-04-01,
// DiskRP 2026-03-02 and GalleryRP 2026-03-03 are the versions armcompute
// v8.4.0 calls, GalleryRP/stable/2025-12-03 @b71f747b the one
// @azure/arm-compute 25.1.1 calls); the Compute previews are those ARM
// lists for virtualMachineScaleSets/virtualMachines
// (Azure/azure-rest-api-specs#27695). Microsoft.Resources: the list ARM
// itself gives for resourceGroups (Azure/azure-cli#28038, previews
// included) and resources/stable/2024-03-01 @cfc781db, 2024-07-01 and
// 2025-03-01 @cd1a17dc, 2024-11-01 and 2025-04-01 @cc8565c7
// (armresources/v3 v3.0.1 and @azure/arm-resources 8.0.0 call 2025-04-01).
// The scale-set NIC operations are the Network provider's under a Compute
// path and are served at the versions armnetwork calls them with.
var apiVersions = map[string][]string{
	"resources": {"2014-04-01-preview", "2015-01-01", "2015-11-01", "2016-02-01", "2016-06-01", "2016-07-01", "2016-09-01", "2017-05-10",
		"2017-06-01", "2017-08-01", "2017-12-01", "2018-01-01", "2018-02-01", "2018-05-01", "2018-06-01", "2018-07-01",
		"2018-08-01", "2018-09-01", "2018-11-01", "2019-03-01", "2019-05-01", "2019-05-10", "2019-06-01", "2019-07-01",
		"2019-08-01", "2019-09-01", "2019-10-01", "2019-11-01", "2020-01-01", "2020-05-01", "2020-06-01", "2020-07-01",
		"2020-08-01", "2020-09-01", "2020-10-01", "2021-01-01", "2021-04-01", "2022-01-01", "2022-03-01-preview", "2022-05-01", "2022-06-01",
		"2022-09-01", "2022-11-01-preview", "2022-12-01", "2023-03-01-preview", "2023-07-01", "2023-07-01-preview",
		"2024-03-01", "2024-07-01", "2024-11-01", "2025-03-01", "2025-04-01"},
	"network": {"2014-12-01-preview", "2015-05-01-preview", "2015-06-15", "2016-03-30", "2016-06-01", "2016-09-01", "2016-12-01", "2017-03-01", "2017-03-30",
		"2017-06-01", "2017-08-01", "2017-09-01", "2017-10-01", "2017-11-01", "2018-01-01", "2018-02-01", "2018-04-01",
		"2018-06-01", "2018-07-01", "2018-08-01", "2018-10-01", "2018-11-01", "2018-12-01", "2019-02-01", "2019-04-01",
		"2019-06-01", "2019-07-01", "2019-08-01", "2019-09-01", "2019-11-01", "2019-12-01", "2020-03-01", "2020-04-01",
		"2020-05-01", "2020-06-01", "2020-07-01", "2020-08-01", "2020-11-01", "2021-02-01", "2021-03-01", "2021-05-01",
		"2021-08-01", "2022-01-01", "2022-05-01", "2022-07-01", "2022-09-01", "2022-11-01", "2023-02-01", "2023-04-01",
		"2023-05-01", "2023-06-01", "2023-09-01", "2023-11-01", "2024-01-01", "2024-03-01", "2024-05-01", "2024-07-01",
		"2024-10-01", "2025-01-01", "2025-03-01", "2025-05-01", "2025-07-01", "2026-01-01"},
	"vmss-network": {"2017-03-30", "2018-10-01"},
	"compute": {"2015-05-01-preview", "2015-06-15", "2016-03-30", "2016-04-30-preview", "2017-03-30", "2017-10-30-preview", "2017-12-01", "2018-04-01", "2018-06-01", "2018-10-01",
		"2019-03-01", "2019-07-01", "2019-12-01", "2020-06-01", "2020-12-01", "2021-03-01", "2021-04-01", "2021-07-01",
		"2021-11-01", "2022-03-01", "2022-08-01", "2022-11-01", "2023-03-01", "2023-07-01", "2023-09-01", "2024-03-01",
		"2024-07-01", "2024-11-01", "2025-04-01", "2025-11-01", "2026-03-01", "2026-04-01"},
	"disks": {"2017-03-30", "2018-04-01", "2018-06-01", "2018-09-30", "2019-03-01", "2019-07-01", "2019-11-01",
		"2020-05-01", "2020-06-30", "2020-09-30", "2020-12-01", "2021-04-01", "2021-08-01", "2021-12-01", "2022-03-02",
		"2022-07-02", "2023-01-02", "2023-04-02", "2023-10-02", "2024-03-02", "2025-01-02", "2026-03-02"},
	// Community galleries exist from 2022-03-03 on.
	"galleries": {"2022-03-03", "2022-08-03", "2023-07-03", "2024-03-03", "2025-03-03", "2025-12-03", "2026-03-03"},
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

// ServedAPIVersionHeader names, on an answer to a request whose
// api-version is newer than any the emulator knows for the type, the
// version whose behaviour it was served with. Azure has no such header:
// it tells a client's author that the emulator guessed.
const ServedAPIVersionHeader = "X-Winkube-Served-Api-Version"

// apiVersionShape is an api-version as Azure writes them: a date, and for a
// preview (or a private build) a suffix.
var apiVersionShape = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2})(-[a-z]+)?$`)

// servedAPIVersion decides how a request's api-version is served. A
// version of the type's list is served as itself. A plain date later than
// the newest plain date in the list is served as that newest version: a
// client released after the emulator sends a version it cannot know,
// which Azure serves; the answer says so in ServedAPIVersionHeader. Every
// other version is refused as ARM refuses it: a malformed one with
// InvalidApiVersionParameter, whatever the type (ARM cannot route what it
// cannot parse, and answers with its own error), a date the type does not
// have (before it existed, or between its versions) and an unknown
// preview with the type's answer (checkAPIVersion).
func servedAPIVersion(op *operationSpec, v string) (served string, e *armError) {
	supported := apiVersions[op.Versions]
	if slices.Contains(supported, v) {
		return v, nil
	}
	m := apiVersionShape.FindStringSubmatch(strings.ToLower(v))
	if m == nil || !validDate(m[1]) {
		return "", errorf(http.StatusBadRequest, "InvalidApiVersionParameter", "The api-version '%s' is invalid. The supported versions are '%s'.", v, strings.Join(newestFirst(supported), ", "))
	}
	if newest := newestStable(supported); m[2] == "" && v > newest {
		return newest, nil
	}
	return "", checkAPIVersion(op, v)
}

func validDate(d string) bool {
	_, err := time.Parse(time.DateOnly, d)
	return err == nil
}

// newestStable is the latest version of a list that is not a preview.
func newestStable(versions []string) string {
	newest := ""
	for _, v := range versions {
		if !strings.Contains(v, "-preview") && v > newest {
			newest = v
		}
	}
	return newest
}

func newestFirst(versions []string) []string {
	out := slices.Clone(versions)
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// noteNewerAPIVersion logs, once per resource provider and version, that a
// request was served with an older version's behaviour.
func (s *Server) noteNewerAPIVersion(op *operationSpec, asked, served string) {
	k := op.Versions + " " + asked
	s.mu.Lock()
	seen := s.newerVersions[k]
	s.newerVersions[k] = true
	s.mu.Unlock()
	if !seen {
		log.Printf("arm: api-version %s of %s is newer than the emulator knows: served as %s, the newest it knows (answers carry %s). If an answer differs from Azure's, report it to winkube's issue tracker with the request and Azure's answer.",
			asked, op.resourceType(), served, ServedAPIVersionHeader)
	}
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
	if op.Versions == "resources" {
		return errorf(http.StatusBadRequest, "InvalidApiVersionParameter", "The api-version '%s' is invalid. The supported versions are '%s'.", v, strings.Join(newestFirst(supported), ", "))
	}
	return errorf(http.StatusBadRequest, "NoRegisteredProviderFound",
		"No registered resource provider found for location '%s' and API version '%s' for type '%s'. The supported api-versions are '%s'. The supported locations are '%s'.",
		"*", v, op.resourceType(), strings.Join(newestFirst(supported), ", "), locationNames())
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
