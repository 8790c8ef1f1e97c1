package arm_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azurecloud "github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	emu "github.com/winkube/winkube/emulator/arm"
)

type cloudDoc struct {
	Name            string `json:"name"`
	ResourceManager string `json:"resourceManager"`
	Authentication  struct {
		LoginEndpoint string   `json:"loginEndpoint"`
		Audiences     []string `json:"audiences"`
	} `json:"authentication"`
	Suffixes map[string]any `json:"suffixes"`
}

// ARM's metadata document, read without a token at each api-version
// clients read it at, describes the emulator's own ARM and Entra ID; a Go
// SDK client configured from it alone (as a custom cloud) signs in and
// creates a resource group.
func TestMetadataEndpointsDescribeTheEmulatorsCloud(t *testing.T) {
	dir, srv, login, c := authWorld(t)
	srv.SetLoginEndpoint(login.URL())
	get := func(version string) (int, http.Header, []byte) {
		t.Helper()
		resp, err := c.Get(srv.URL() + "/metadata/endpoints?api-version=" + version)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	wantAuth := func(version, loginEndpoint string, audiences []string) {
		t.Helper()
		if strings.TrimRight(loginEndpoint, "/") != login.URL() || len(audiences) == 0 || strings.TrimRight(audiences[0], "/") != srv.URL() {
			t.Errorf("%s: login endpoint %q, audiences %v; want %s and %s", version, loginEndpoint, audiences, login.URL(), srv.URL())
		}
	}

	// The Azure CLI's `cloud register` (msrestazure) and Azure Stack's
	// shape.
	for _, v := range []string{"2015-01-01", "1.0"} {
		status, _, body := get(v)
		var doc struct {
			Authentication struct {
				LoginEndpoint string   `json:"loginEndpoint"`
				Audiences     []string `json:"audiences"`
			} `json:"authentication"`
			GalleryEndpoint *string `json:"galleryEndpoint"`
		}
		if err := json.Unmarshal(body, &doc); status != http.StatusOK || err != nil || doc.GalleryEndpoint == nil {
			t.Fatalf("%s: %d %s", v, status, body)
		}
		wantAuth(v, doc.Authentication.LoginEndpoint, doc.Authentication.Audiences)
	}
	// A list of clouds.
	status, _, body := get("2019-05-01")
	var clouds []cloudDoc
	if err := json.Unmarshal(body, &clouds); status != http.StatusOK || err != nil || len(clouds) != 1 {
		t.Fatalf("2019-05-01: %d %s", status, body)
	}
	wantAuth("2019-05-01", clouds[0].Authentication.LoginEndpoint, clouds[0].Authentication.Audiences)
	// One cloud, and a later version served as it, saying so.
	var doc cloudDoc
	for _, v := range []string{"2022-09-01", afterToday} {
		status, hdr, body := get(v)
		if err := json.Unmarshal(body, &doc); status != http.StatusOK || err != nil || doc.Name == "" || doc.Suffixes == nil {
			t.Fatalf("%s: %d %s", v, status, body)
		}
		if strings.TrimRight(doc.ResourceManager, "/") != srv.URL() {
			t.Errorf("%s: resourceManager %q, want %s", v, doc.ResourceManager, srv.URL())
		}
		wantAuth(v, doc.Authentication.LoginEndpoint, doc.Authentication.Audiences)
		if served := hdr.Get(emu.ServedAPIVersionHeader); (v == afterToday) != (served == "2022-09-01") {
			t.Errorf("%s: %s %q", v, emu.ServedAPIVersionHeader, served)
		}
	}
	for _, v := range []string{"", "2014-01-01", "2023-01-01-preview", "latest"} {
		if status, _, body := get(v); status != http.StatusBadRequest {
			t.Errorf("api-version %q: %d %s, want 400", v, status, body)
		}
	}

	// The Go SDK configured from the document only.
	p, secret, err := dir.CreateServicePrincipal(authTenant, "from-metadata")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.AssignRole(p.ObjectID, "Contributor", "/subscriptions/"+sub); err != nil {
		t.Fatal(err)
	}
	custom := azurecloud.Configuration{ActiveDirectoryAuthorityHost: doc.Authentication.LoginEndpoint, Services: map[azurecloud.ServiceName]azurecloud.ServiceConfiguration{
		azurecloud.ResourceManager: {Endpoint: doc.ResourceManager, Audience: doc.Authentication.Audiences[0]}}}
	cred, err := azidentity.NewClientSecretCredential(authTenant, p.ClientID, secret, &azidentity.ClientSecretCredentialOptions{
		ClientOptions: azcore.ClientOptions{Cloud: custom, Transport: c}, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	groups, err := armresources.NewResourceGroupsClient(sub, cred, &arm.ClientOptions{ClientOptions: azcore.ClientOptions{Cloud: custom, Transport: c}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groups.CreateOrUpdate(context.Background(), "from-metadata", armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatalf("a client configured from the metadata document: %v", err)
	}
}
