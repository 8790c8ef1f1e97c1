package localworld

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/winkube/winkube/internal/azure/endpoint"
)

// ARMEndpointFile, in the state directory, says where the running world's
// Azure is: its address changes at every start.
const ARMEndpointFile = "arm-endpoint.json"

// ARMEndpoint is the world's Azure Resource Manager, Entra ID and the CA
// their TLS certificates chain to.
type ARMEndpoint struct {
	ResourceManager string `json:"resourceManagerEndpoint"`
	Authority       string `json:"activeDirectoryAuthorityHost"`
	CACertPEM       string `json:"caCertPEM"`
}

// WriteARMEndpoint writes e to path, readable by its owner only.
func WriteARMEndpoint(path string, e ARMEndpoint) error {
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// ReadARMEndpoint reads what WriteARMEndpoint wrote, as an endpoint with no
// credential: the caller acts as a cluster's identity.
func ReadARMEndpoint(path string) (endpoint.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return endpoint.Config{}, fmt.Errorf("the local world has not said where its Azure is (%w): is it running? start it with 'winkube up'", err)
	}
	var e ARMEndpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return endpoint.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return endpoint.Config{ResourceManagerEndpoint: e.ResourceManager, AuthorityHost: e.Authority, CACertPEM: []byte(e.CACertPEM)}, nil
}
