package cloud

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
