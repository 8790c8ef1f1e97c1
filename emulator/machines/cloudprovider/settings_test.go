package cloudprovider

import (
	"errors"
	"strings"
	"testing"
)

// The credential is picked from the cloud config in cloud-provider-azure's
// order: a managed identity wins over a client secret that is also there,
// a certificate or workload identity is refused here with what to use,
// and a config with none has none.
func TestCredentialsFollowTheCloudConfig(t *testing.T) {
	imds := func(node string) string { return "http://imds/" + node }
	for _, tc := range []struct {
		name   string
		config AzureConfig
		want   Credentials
		err    string
	}{
		{"secret", AzureConfig{TenantID: "t", AADClientID: "c", AADClientSecret: "s"}, Credentials{TenantID: "t", ClientID: "c", ClientSecret: "s"}, ""},
		{"managed identity first", AzureConfig{TenantID: "t", AADClientID: "c", AADClientSecret: "s", UseManagedIdentityExtension: true},
			Credentials{TenantID: "t", ManagedIdentity: true, IMDS: "http://imds/n1"}, ""},
		{"user-assigned", AzureConfig{UseManagedIdentityExtension: true, UserAssignedIdentityID: "id"}, Credentials{ManagedIdentity: true, UserAssignedID: "id", IMDS: "http://imds/n1"}, ""},
		{"a client ID alone is no credential", AzureConfig{TenantID: "t", AADClientID: "c"}, Credentials{}, ErrNoAuth.Error()},
		{"certificate", AzureConfig{AADClientID: "c", AADClientCertPath: "/etc/kubernetes/sp.pfx"}, Credentials{}, "client secrets only"},
		{"workload identity", AzureConfig{UseFederatedWorkload: true, AADClientID: "c"}, Credentials{}, "workload-identity webhook"},
		{"a token file alone is no workload identity", AzureConfig{AADFederatedTokenFile: "/var/run/token", AADClientID: "c", AADClientSecret: "s"}, Credentials{ClientID: "c", ClientSecret: "s"}, ""},
		{"data-plane identity", AzureConfig{AADMSIDataPlaneIdentityPath: "/etc/msi.json"}, Credentials{}, "MSI data-plane identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Settings{Node: "n1", ConfigPath: DefaultCloudConfig, Config: tc.config}.credentials(imds)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if tc.err == ErrNoAuth.Error() && !errors.Is(err, ErrNoAuth) {
					t.Errorf("%v is not ErrNoAuth", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Node, tc.want.ConfigPath = "n1", DefaultCloudConfig
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The container's AZURE_* variables win over the file, as the SDK's
// variables do for cloud-provider-azure.
func TestCredentialsFromTheEnvironmentWin(t *testing.T) {
	st := Settings{Node: "n1", Config: AzureConfig{TenantID: "file-t", AADClientID: "file-c", AADClientSecret: "file-s"},
		Env: map[string]string{"AZURE_TENANT_ID": "env-t", "AZURE_CLIENT_SECRET": "env-s"}}
	got, err := st.credentials(nil)
	if err != nil || got.TenantID != "env-t" || got.ClientID != "file-c" || got.ClientSecret != "env-s" {
		t.Errorf("got %+v %v", got, err)
	}
	st = Settings{Node: "n1", Config: AzureConfig{AADClientID: "c", AADClientSecret: "s"}, Env: map[string]string{"AZURE_FEDERATED_TOKEN_FILE": "/var/run/secrets/azure/tokens/azure-identity-token"}}
	if _, err := st.credentials(nil); err == nil || !strings.Contains(err.Error(), "workload identity") {
		t.Errorf("a token file from the environment: %v", err)
	}
}
