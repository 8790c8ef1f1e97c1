package arm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azurecloud "github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	emu "github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// controlRequest calls the emulator's control API with a bearer token and
// returns the status and body.
func controlRequest(t *testing.T, w *world, method, path, tok string, body any) (int, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&buf).Encode(body)
	}
	req, _ := http.NewRequest(method, w.srv.URL()+path, &buf)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := w.blobClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

// A VM's managed identity, even one its cluster made Owner of the
// subscription, cannot inject faults: the control API answers only the
// emulator's operators. The faults stay as they were and ARM keeps
// answering the identity's requests.
func TestFaultInjectionOnlyByOperators(t *testing.T) {
	dir, err := entra.New(entra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	operator := principalWithRole(t, dir, "operator", "", "")
	w := newWorld(t, func(o *emu.Options) { o.Directory = dir; o.Token = ""; o.Operators = []string{operator.ObjectID} })
	owner := principalWithRole(t, dir, "owner", "Owner", "/subscriptions/"+sub)
	*w = *clientsWithToken(t, w, tokenFor(t, dir, owner, w.srv.URL()))
	w.group("rg")
	vm := vmWithIdentity(w, "rg", "vm-0", w.network("rg"), &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeSystemAssigned)})
	if err := dir.AssignRole(*vm.Identity.PrincipalID, "Owner", "/subscriptions/"+sub); err != nil {
		t.Fatal(err)
	}
	status, body := imdsToken(t, machineNamed(t, w.rt, 1, "vm-0").IMDS, url.Values{"resource": {w.srv.URL()}}, true)
	if status != http.StatusOK {
		t.Fatalf("IMDS token: %d %v", status, body)
	}
	asVM := body["access_token"]
	opToken := tokenFor(t, dir, operator, w.srv.URL())

	attack := emu.FaultConfig{Faults: []emu.Fault{{Percent: 100, Status: 500}}}
	for name, tok := range map[string]string{"the VM's managed identity": asVM, "the subscription's Owner": tokenFor(t, dir, owner, w.srv.URL())} {
		for _, req := range []struct{ method, path string }{{http.MethodPut, "/emulator/faults"}, {http.MethodGet, "/emulator/faults"}, {http.MethodDelete, "/emulator/counters"}} {
			status, b := controlRequest(t, w, req.method, req.path, tok, attack)
			if status != http.StatusForbidden || !strings.Contains(string(b), "AuthorizationFailed") {
				t.Errorf("%s: %s %s answered %d %s, want 403 AuthorizationFailed", name, req.method, req.path, status, b)
			}
		}
	}
	status, b := controlRequest(t, w, http.MethodGet, "/emulator/faults", opToken, nil)
	var got emu.FaultConfig
	if err := json.Unmarshal(b, &got); status != http.StatusOK || err != nil || len(got.Faults) != 0 {
		t.Fatalf("the operator reads the faults: %d %s (%v)", status, b, err)
	}
	// The identity's own requests are served: no fault was injected.
	vms := must(clientsWithToken(t, w, asVM).compute.NewVirtualMachinesClient(), nil)
	if _, err := vms.Get(w.ctx, "rg", "vm-0", nil); err != nil {
		t.Fatalf("the VM's identity reads its VM: %v", err)
	}
	// The operator may.
	if status, b := controlRequest(t, w, http.MethodPut, "/emulator/faults", opToken, emu.FaultConfig{Faults: []emu.Fault{{Method: "GET", Kind: "virtualNetworks", Percent: 100, Status: 503}}}); status != http.StatusOK {
		t.Fatalf("the operator's PUT: %d %s", status, b)
	}
}

// A token of another tenant is refused for the emulator's subscriptions as
// ARM refuses it, even though its principal holds a role there, through
// the real azidentity credential and SDK: nothing is created.
func TestTokenFromAnotherTenantIsRefused(t *testing.T) {
	dir, srv, login, c := authWorldWith(t, func(o *emu.Options) { o.TenantID = authTenant })
	const otherTenant = "00000000-0000-4000-8000-00000000bad0"
	p, secret, err := dir.CreateServicePrincipal(otherTenant, "foreign")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.AssignRole(p.ObjectID, "Contributor", "/subscriptions/"+sub); err != nil {
		t.Fatal(err)
	}
	cfg := endpoint.Config{ResourceManagerEndpoint: srv.URL(), AuthorityHost: login.URL(), Transport: c}
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := azidentity.NewClientSecretCredential(otherTenant, p.ClientID, secret, &azidentity.ClientSecretCredentialOptions{
		ClientOptions: azcore.ClientOptions{Cloud: azurecloud.Configuration{ActiveDirectoryAuthorityHost: login.URL()}, Transport: c}, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	groups, _ := armresources.NewResourceGroupsClient(sub, cred, opts)
	_, err = groups.CreateOrUpdate(context.Background(), "foreign-rg", armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusUnauthorized || re.ErrorCode != "InvalidAuthenticationTokenTenant" {
		t.Fatalf("a token of tenant %s on a subscription of tenant %s: %v", otherTenant, authTenant, err)
	}
	wantAuthority := login.URL() + "/" + authTenant
	if !strings.Contains(err.Error(), "It must match the tenant '"+wantAuthority+"/' associated with this subscription. Please use the authority (URL) '"+wantAuthority+"' to get the token.") {
		t.Errorf("the message: %v", err)
	}
	if got := re.RawResponse.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, `Bearer authorization_uri="`+wantAuthority+`", error="invalid_token"`) {
		t.Errorf("WWW-Authenticate: %q", got)
	}
	if ids := srv.ResourceIDs(); len(ids) != 0 {
		t.Fatalf("the foreign token created %v", ids)
	}
	// The subscription's own tenant is served.
	own := principalWithRole(t, dir, "own", "Reader", "/subscriptions/"+sub)
	tok, _ := dir.IssueTokenForTest(own, srv.URL(), time.Now().Add(time.Hour))
	if status, code, msg := armRequest(t, c, http.MethodGet, srv.URL()+"/subscriptions/"+sub+"/resourcegroups/foreign-rg?api-version=2021-04-01", "Bearer "+tok); status != 404 {
		t.Fatalf("the subscription's tenant: %d %s %s", status, code, msg)
	}
}
