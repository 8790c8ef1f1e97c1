package arm

import (
	"net/http"
	"slices"
	"strings"
)

// metadataPath is ARM's cloud metadata document: where a client that is
// given only an ARM endpoint learns the rest of the cloud (the Entra ID
// authority, the token audience, the DNS suffixes). Azure serves it without
// authentication; `az cloud register --endpoint-resource-manager` reads it
// before it has any credential.
const metadataPath = "/metadata/endpoints"

// metadataVersions are the api-versions the document is read at, by shape:
//   - 1.0 and 2015-01-01: one object of galleryEndpoint, graphEndpoint,
//     portalEndpoint and authentication (Azure Stack Hub's documentation
//     uses 1.0; msrestazure/azure_cloud.py's METADATA_ENDPOINT_SUFFIX,
//     which the Azure CLI's `cloud register` calls, 2015-01-01);
//   - 2019-05-01: a list of clouds, each with name, resourceManager,
//     authentication and suffixes (hashicorp/go-azure-sdk
//     sdk/environments/metadata.go @f7a7383c decodes a list);
//   - 2022-09-01: the one cloud the endpoint belongs to, the same fields
//     (go-azure-sdk sdk/internal/metadata/client.go,
//     metaDataResponse20220901; azure-cli-core cloud.py's
//     _arm_to_cli_mapper reads the same names).
//
// A later date is served as 2022-09-01, as apiversions.go serves a newer
// version of any other type.
var metadataVersions = []string{"1.0", "2015-01-01", "2019-05-01", "2022-09-01"}

// SetLoginEndpoint names the Entra ID authority host (https://host:port) the
// metadata document points clients at; it is served separately and started
// after ARM, whose certificate authority it shares.
func (s *Server) SetLoginEndpoint(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loginEndpoint = strings.TrimRight(url, "/")
}

func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "The requested resource does not support http method '%s'.", r.Method))
		return
	}
	v := r.URL.Query().Get("api-version")
	if v == "" {
		writeError(w, errorf(http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests."))
		return
	}
	served := v
	if !slices.Contains(metadataVersions, v) {
		m := apiVersionShape.FindStringSubmatch(v)
		newest := metadataVersions[len(metadataVersions)-1]
		if m == nil || !validDate(m[1]) || m[2] != "" || v < newest {
			writeError(w, errorf(http.StatusBadRequest, "InvalidApiVersionParameter", "The api-version '%s' is invalid. The supported versions are '%s'.",
				v, strings.Join(newestFirst(metadataVersions), ", ")))
			return
		}
		served = newest
		w.Header().Set(ServedAPIVersionHeader, served)
		s.noteNewerAPIVersion(&operationSpec{Versions: "metadata", seg: []string{"metadata", "endpoints"}}, v, served)
	}
	s.mu.Lock()
	login := s.loginEndpoint
	s.mu.Unlock()
	arm := s.URL()
	auth := map[string]any{
		"loginEndpoint": login + "/",
		// The emulator takes tokens for either spelling of its URL
		// (auth.go); the first is the one clients ask for.
		"audiences":        []string{arm + "/", arm},
		"tenant":           "common",
		"identityProvider": "AAD",
	}
	switch served {
	case "1.0", "2015-01-01":
		writeJSON(w, http.StatusOK, map[string]any{
			"galleryEndpoint": "", "graphEndpoint": "", "portalEndpoint": "",
			"authentication": auth,
		})
		return
	}
	cloud := map[string]any{
		"name":            "WinkubeEmulator",
		"resourceManager": arm + "/",
		"authentication":  auth,
		// The emulator serves no gallery, portal, Graph, batch, media,
		// SQL or Data Lake endpoints, and no service under a DNS suffix
		// (its boot diagnostics blobs are on the ARM host): they are
		// left out rather than pointed at Azure's.
		"suffixes": map[string]any{},
	}
	if served == "2019-05-01" {
		writeJSON(w, http.StatusOK, []any{cloud})
		return
	}
	writeJSON(w, http.StatusOK, cloud)
}
