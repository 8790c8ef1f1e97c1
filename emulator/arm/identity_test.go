package arm_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	emu "github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

const (
	contributorRole = "b24988ac-6180-42a0-ab88-20f7382dd24c"
	ownerRole       = "8e3af657-a8ff-443c-a75c-2fe8c4bcb635"
)

// idWorld is an emulator that accepts only its directory's tokens, with
// an Owner of the subscription whose token the SDK clients of its world
// present.
type idWorld struct {
	*world
	dir        *entra.Directory
	owner      entra.Principal
	ownerToken string
}

func newIDWorld(t *testing.T) *idWorld {
	t.Helper()
	dir, err := entra.New(entra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, func(o *emu.Options) { o.Directory = dir; o.Token = "" })
	owner := principalWithRole(t, dir, "owner", "Owner", "/subscriptions/"+sub)
	iw := &idWorld{world: w, dir: dir, owner: owner, ownerToken: tokenFor(t, dir, owner, w.srv.URL())}
	// The world's clients act as the Owner.
	*iw.world = *clientsWithToken(t, w, iw.ownerToken)
	return iw
}

func principalWithRole(t *testing.T, dir *entra.Directory, name, role, scope string) entra.Principal {
	t.Helper()
	p, _, err := dir.CreateServicePrincipal(authTenant, name)
	if err != nil {
		t.Fatal(err)
	}
	if role != "" {
		if err := dir.AssignRole(p.ObjectID, role, scope); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func tokenFor(t *testing.T, dir *entra.Directory, p entra.Principal, audience string) string {
	t.Helper()
	tok, err := dir.IssueTokenForTest(p, audience, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func clientOptions(t *testing.T, w *world) *arm.ClientOptions {
	t.Helper()
	cfg := endpoint.Config{ResourceManagerEndpoint: w.srv.URL(), CACertPEM: w.srv.CACertPEM(), Credential: endpoint.StaticToken("x"),
		Retry: &policy.RetryOptions{MaxRetries: -1}}
	o, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// clientsWithToken is a copy of w whose clients present another token.
func clientsWithToken(t *testing.T, w *world, tok string) *world {
	t.Helper()
	c := *w
	cred, o := endpoint.StaticToken(tok), clientOptions(t, w)
	c.compute = must(armcompute.NewClientFactory(sub, cred, o))
	c.net = must(armnetwork.NewClientFactory(sub, cred, o))
	c.groups = must(armresources.NewResourceGroupsClient(sub, cred, o))
	c.res = must(armresources.NewClient(sub, cred, o))
	return &c
}

func msiClient(t *testing.T, w *world, tok string) *armmsi.UserAssignedIdentitiesClient {
	return must(armmsi.NewUserAssignedIdentitiesClient(sub, endpoint.StaticToken(tok), clientOptions(t, w)))
}

func authzClients(t *testing.T, w *world, tok string) (*armauthorization.RoleAssignmentsClient, *armauthorization.RoleDefinitionsClient) {
	o := clientOptions(t, w)
	return must(armauthorization.NewRoleAssignmentsClient(sub, endpoint.StaticToken(tok), o)),
		must(armauthorization.NewRoleDefinitionsClient(endpoint.StaticToken(tok), o))
}

func rgID(rg string) string { return "/subscriptions/" + sub + "/resourceGroups/" + rg }

func roleDefID(guid string) string {
	return "/subscriptions/" + sub + "/providers/Microsoft.Authorization/roleDefinitions/" + guid
}

// imdsToken asks a machine's IMDS for a token, with the Metadata header
// unless told not to, and returns the status and the decoded answer.
func imdsToken(t *testing.T, base string, query url.Values, metadata bool) (int, map[string]string) {
	t.Helper()
	if query == nil {
		query = url.Values{}
	}
	query.Set("api-version", "2018-02-01")
	if query.Get("resource") == "" {
		query.Set("resource", "https://management.azure.com/")
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/metadata/identity/oauth2/token?"+query.Encode(), nil)
	if metadata {
		req.Header.Set("Metadata", "true")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]string{}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("IMDS answered %d %s", resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

func vmWithIdentity(w *world, rg, name, subnet string, id *armcompute.VirtualMachineIdentity) armcompute.VirtualMachine {
	nic := w.nic(rg, name+"-nic", subnet)
	vm := linuxVM(*nic.ID, "#cloud-config\n")
	vm.Identity = id
	return done(must(w.compute.NewVirtualMachinesClient(), nil).BeginCreateOrUpdate(w.ctx, rg, name, vm, nil)).VirtualMachine
}

func machineNamed(t *testing.T, rt *emu.RecordingRuntime, n int, name string) emu.Machine {
	t.Helper()
	for _, m := range waitRunning(t, rt, n) {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no running machine %s", name)
	return emu.Machine{}
}

// A user-assigned identity is created, read, listed and deleted through
// armmsi; it is a managed-identity principal of the directory while it
// exists.
func TestUserAssignedIdentitiesAsAzureServesThem(t *testing.T) {
	w := newIDWorld(t)
	w.group("ids")
	c := msiClient(t, w.world, w.ownerToken)
	created := must(c.CreateOrUpdate(w.ctx, "ids", "capi-ccm", armmsi.Identity{Location: to.Ptr(location)}, nil))
	p := created.Properties
	if p == nil || p.PrincipalID == nil || p.ClientID == nil || *p.TenantID != authTenant {
		t.Fatalf("created identity: %+v", p)
	}
	if *created.Type != "Microsoft.ManagedIdentity/userAssignedIdentities" {
		t.Errorf("type %s", *created.Type)
	}
	mi, ok := w.dir.Principal(*p.ClientID)
	if !ok || mi.Kind != entra.ManagedIdentity || mi.ObjectID != *p.PrincipalID {
		t.Fatalf("the directory's principal: %+v %v", mi, ok)
	}
	again := must(c.CreateOrUpdate(w.ctx, "ids", "capi-ccm", armmsi.Identity{Location: to.Ptr(location), Tags: map[string]*string{"a": to.Ptr("b")}}, nil))
	if *again.Properties.ClientID != *p.ClientID || *again.Properties.PrincipalID != *p.PrincipalID {
		t.Errorf("a second PUT changed the identity: %+v", again.Properties)
	}
	got := must(c.Get(w.ctx, "ids", "capi-ccm", nil))
	if *got.Properties.PrincipalID != *p.PrincipalID {
		t.Errorf("GET: %+v", got.Properties)
	}
	pager := c.NewListByResourceGroupPager("ids", nil)
	page := must(pager.NextPage(w.ctx))
	if len(page.Value) != 1 || *page.Value[0].Name != "capi-ccm" {
		t.Errorf("listed: %d", len(page.Value))
	}
	// A role assignment made for it outlives it, orphaned.
	ra, _ := authzClients(t, w.world, w.ownerToken)
	must(ra.Create(w.ctx, rgID("ids"), "0c1f6b5e-27c4-4d54-9d7b-5b2f1c1c7a01", armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		PrincipalID: p.PrincipalID, RoleDefinitionID: to.Ptr(roleDefID(contributorRole)), PrincipalType: to.Ptr(armauthorization.PrincipalTypeServicePrincipal)}}, nil))
	must(c.Delete(w.ctx, "ids", "capi-ccm", nil))
	if _, ok := w.dir.Principal(*p.ClientID); ok {
		t.Error("the identity's principal outlived it")
	}
	_, err := c.Get(w.ctx, "ids", "capi-ccm", nil)
	azureCode(t, err, "ResourceNotFound")
	orphaned := 0
	for _, a := range must(ra.NewListForScopePager(rgID("ids"), nil).NextPage(w.ctx)).Value {
		if *a.Properties.PrincipalID == *p.PrincipalID {
			orphaned++
		}
	}
	if orphaned != 1 {
		t.Errorf("the orphaned role assignment: %d listed", orphaned)
	}
}

// A VM's system-assigned identity gets tokens from that VM's IMDS; ARM
// accepts them, and its RBAC refuses them until an Owner grants the
// identity Contributor on the resource group through RoleAssignmentsClient.
func TestSystemAssignedIdentityTokensAndRBAC(t *testing.T) {
	w := newIDWorld(t)
	w.group("rg")
	subnet := w.network("rg")
	vm := vmWithIdentity(w.world, "rg", "cp-0", subnet, &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeSystemAssigned)})
	if vm.Identity == nil || vm.Identity.PrincipalID == nil || *vm.Identity.TenantID != authTenant {
		t.Fatalf("the VM's identity: %+v", vm.Identity)
	}
	principalID := *vm.Identity.PrincipalID
	if p, ok := w.dir.PrincipalByObjectID(principalID); !ok || p.Kind != entra.ManagedIdentity {
		t.Fatalf("no managed-identity principal %s in the directory", principalID)
	}
	m := machineNamed(t, w.rt, 1, "cp-0")
	if !strings.HasPrefix(m.IMDS, "http://127.0.0.1:") {
		t.Fatalf("the machine's IMDS: %q", m.IMDS)
	}

	status, body := imdsToken(t, m.IMDS, nil, false)
	if status != http.StatusBadRequest || body["error"] != "invalid_request" || body["error_description"] != "Required metadata header not specified" {
		t.Errorf("without Metadata: true: %d %v", status, body)
	}
	status, body = imdsToken(t, m.IMDS, url.Values{"resource": {w.srv.URL()}}, true)
	if status != http.StatusOK || body["access_token"] == "" || body["token_type"] != "Bearer" || body["resource"] != w.srv.URL() {
		t.Fatalf("IMDS token: %d %v", status, body)
	}

	asVM := clientsWithToken(t, w.world, body["access_token"])
	vms := must(asVM.compute.NewVirtualMachinesClient(), nil)
	_, err := vms.Get(w.ctx, "rg", "cp-0", nil)
	re := azureCode(t, err, "AuthorizationFailed")
	if re.StatusCode != http.StatusForbidden || !strings.Contains(err.Error(), principalID) {
		t.Errorf("before the role assignment: %v", err)
	}

	ra, rd := authzClients(t, w.world, w.ownerToken)
	name := "9f6c1f3a-0d7e-4b1c-8f4e-2a5b6c7d8e9f"
	created := must(ra.Create(w.ctx, rgID("rg"), name, armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		PrincipalID: to.Ptr(principalID), RoleDefinitionID: to.Ptr(roleDefID(contributorRole)), PrincipalType: to.Ptr(armauthorization.PrincipalTypeServicePrincipal)}}, nil))
	if *created.Name != name || !strings.EqualFold(*created.Properties.Scope, rgID("rg")) || *created.Properties.RoleDefinitionID != roleDefID(contributorRole) {
		t.Errorf("created: %+v", created.Properties)
	}
	if got := must(vms.Get(w.ctx, "rg", "cp-0", nil)); *got.Name != "cp-0" {
		t.Errorf("GET with the identity's token: %s", *got.Name)
	}
	if _, err := must(asVM.compute.NewVirtualMachinesClient(), nil).Get(w.ctx, "elsewhere", "x", nil); err == nil || !strings.Contains(err.Error(), "AuthorizationFailed") {
		t.Errorf("outside the resource group: %v", err)
	}

	got := must(ra.Get(w.ctx, rgID("rg"), name, nil))
	if *got.Properties.PrincipalID != principalID {
		t.Errorf("GET of the assignment: %+v", got.Properties)
	}
	at := must(ra.NewListForScopePager(rgID("rg")+"/providers/Microsoft.Compute/virtualMachines/cp-0", nil).NextPage(w.ctx))
	if len(at.Value) != 2 { // the Owner's, above, and the VM's, at the group
		t.Errorf("assignments that apply to the VM: %d", len(at.Value))
	}
	def := must(rd.Get(w.ctx, "subscriptions/"+sub, contributorRole, nil))
	if *def.Properties.RoleName != "Contributor" || *def.Properties.RoleType != "BuiltInRole" {
		t.Errorf("Contributor's definition: %+v", def.Properties)
	}
	defs := must(rd.NewListPager("subscriptions/"+sub, nil).NextPage(w.ctx))
	names := map[string]string{}
	for _, d := range defs.Value {
		names[*d.Properties.RoleName] = *d.Name
	}
	if names["Network Contributor"] != "4d97b98b-1d4f-4787-a291-c67834d212e7" || names["User Access Administrator"] != "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9" || names["Owner"] != ownerRole {
		t.Errorf("built-in roles: %v", names)
	}

	must(ra.Delete(w.ctx, rgID("rg"), name, nil))
	_, err = vms.Get(w.ctx, "rg", "cp-0", nil)
	azureCode(t, err, "AuthorizationFailed")

	// The system-assigned principal goes with the VM.
	done(must(w.compute.NewVirtualMachinesClient(), nil).BeginDelete(w.ctx, "rg", "cp-0", nil))
	if _, ok := w.dir.PrincipalByObjectID(principalID); ok {
		t.Error("the VM's principal outlived it")
	}
	if status, body := imdsToken(t, m.IMDS, nil, true); status != http.StatusBadRequest || body["error_description"] != "Identity not found" {
		t.Errorf("IMDS of a deleted VM: %d %v", status, body)
	}
}

// A user-assigned identity attached to one VM gets tokens there, and
// "Identity not found" on another VM; a missing identity is refused.
func TestUserAssignedIdentityOnlyOnItsMachine(t *testing.T) {
	w := newIDWorld(t)
	w.group("rg")
	subnet := w.network("rg")
	uais := msiClient(t, w.world, w.ownerToken)
	uai := must(uais.CreateOrUpdate(w.ctx, "rg", "ccm", armmsi.Identity{Location: to.Ptr(location)}, nil))
	other := must(uais.CreateOrUpdate(w.ctx, "rg", "other", armmsi.Identity{Location: to.Ptr(location)}, nil))

	withUAI := vmWithIdentity(w.world, "rg", "with", subnet, &armcompute.VirtualMachineIdentity{
		Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned), UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{*uai.ID: {}}})
	entry := withUAI.Identity.UserAssignedIdentities[*uai.ID]
	if entry == nil || *entry.ClientID != *uai.Properties.ClientID || *entry.PrincipalID != *uai.Properties.PrincipalID {
		t.Fatalf("the VM's user-assigned identity: %+v", withUAI.Identity)
	}
	vmWithIdentity(w.world, "rg", "without", subnet, &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeSystemAssigned)})

	mWith, mWithout := machineNamed(t, w.rt, 2, "with"), machineNamed(t, w.rt, 2, "without")
	byClient := url.Values{"client_id": {*uai.Properties.ClientID}}
	if status, body := imdsToken(t, mWith.IMDS, byClient, true); status != http.StatusOK || body["client_id"] != *uai.Properties.ClientID {
		t.Errorf("its own VM: %d %v", status, body)
	}
	if status, body := imdsToken(t, mWith.IMDS, nil, true); status != http.StatusOK || body["client_id"] != *uai.Properties.ClientID {
		t.Errorf("its own VM, no selector, one identity: %d %v", status, body)
	}
	if status, body := imdsToken(t, mWith.IMDS, url.Values{"msi_res_id": {*uai.ID}}, true); status != http.StatusOK {
		t.Errorf("by resource ID: %d %v", status, body)
	}
	status, body := imdsToken(t, mWithout.IMDS, byClient, true)
	if status != http.StatusBadRequest || body["error"] != "invalid_request" || body["error_description"] != "Identity not found" {
		t.Errorf("another VM: %d %v", status, body)
	}

	// Two user-assigned identities and no selector.
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	upd := done(vms.BeginUpdate(w.ctx, "rg", "with", armcompute.VirtualMachineUpdate{Identity: &armcompute.VirtualMachineIdentity{
		Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned), UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{*uai.ID: {}, *other.ID: {}}}}, nil))
	if len(upd.Identity.UserAssignedIdentities) != 2 {
		t.Fatalf("after the update: %+v", upd.Identity)
	}
	status, body = imdsToken(t, mWith.IMDS, nil, true)
	if status != http.StatusBadRequest || !strings.HasPrefix(body["error_description"], "Multiple user assigned identities exist") {
		t.Errorf("two identities, no selector: %d %v", status, body)
	}

	missing := rgID("rg") + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/nope"
	nic := w.nic("rg", "bad-nic", subnet)
	bad := linuxVM(*nic.ID, "")
	bad.Identity = &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned), UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{missing: {}}}
	err := pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "bad", bad, nil))
	re := azureCode(t, err, "FailedIdentityOperation")
	if re.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "Resource '"+missing+"' was not found.") {
		t.Errorf("a missing identity: %v", err)
	}
}

// Azure's rules for writing role assignments: the caller needs
// roleAssignments/write (a Contributor has not), the principal must exist,
// one grant has one name, and names are GUIDs.
func TestRoleAssignmentRules(t *testing.T) {
	w := newIDWorld(t)
	w.group("rg")
	target := principalWithRole(t, w.dir, "target", "", "")
	contributor := principalWithRole(t, w.dir, "contributor", "Contributor", "/subscriptions/"+sub)
	params := func(principal string) armauthorization.RoleAssignmentCreateParameters {
		return armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
			PrincipalID: to.Ptr(principal), RoleDefinitionID: to.Ptr(roleDefID(contributorRole))}}
	}

	asContributor, _ := authzClients(t, w.world, tokenFor(t, w.dir, contributor, w.srv.URL()))
	_, err := asContributor.Create(w.ctx, rgID("rg"), "2b0c7f4e-5a1d-4c3b-9e8f-7a6b5c4d3e2f", params(target.ObjectID), nil)
	re := azureCode(t, err, "AuthorizationFailed")
	if re.StatusCode != http.StatusForbidden || !strings.Contains(err.Error(), "Microsoft.Authorization/roleAssignments/write") {
		t.Errorf("a Contributor assigning a role: %v", err)
	}
	if len(must(asContributor.NewListForScopePager(rgID("rg"), nil).NextPage(w.ctx)).Value) == 0 {
		t.Error("a Contributor may read role assignments")
	}

	ra, _ := authzClients(t, w.world, w.ownerToken)
	_, err = ra.Create(w.ctx, rgID("rg"), "3c1d8a5f-6b2e-4d4c-8f90-8b7c6d5e4f30", params("11111111-2222-4333-8444-555555555555"), nil)
	re = azureCode(t, err, "PrincipalNotFound")
	if re.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "Principal 11111111222243338444555555555555 does not exist in the directory "+authTenant) {
		t.Errorf("an unknown principal: %v", err)
	}
	first := must(ra.Create(w.ctx, rgID("rg"), "4d2e9b60-7c3f-4e5d-9a01-9c8d7e6f5041", params(target.ObjectID), nil))
	if *first.Properties.PrincipalID != target.ObjectID {
		t.Errorf("created: %+v", first.Properties)
	}
	must(ra.Create(w.ctx, rgID("rg"), "4d2e9b60-7c3f-4e5d-9a01-9c8d7e6f5041", params(target.ObjectID), nil))
	_, err = ra.Create(w.ctx, rgID("rg"), "5e3fac71-8d40-4f6e-8b12-ad9e8f706152", params(target.ObjectID), nil)
	re = azureCode(t, err, "RoleAssignmentExists")
	if re.StatusCode != http.StatusConflict {
		t.Errorf("the same grant under another name: %v", err)
	}
	_, err = ra.Create(w.ctx, rgID("rg"), "not-a-guid", params(target.ObjectID), nil)
	azureCode(t, err, "InvalidRoleAssignmentId")
	_, err = ra.Get(w.ctx, rgID("rg"), "6f40bd82-9e51-4a7f-9c23-be0f9a817263", nil)
	var rerr *azcore.ResponseError
	if !errors.As(err, &rerr) || rerr.StatusCode != http.StatusNotFound {
		t.Errorf("a missing assignment: %v", err)
	}
}
