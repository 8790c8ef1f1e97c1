package controllers_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/roleassignments"
	"github.com/winkube/winkube/internal/azurejson"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
)

// Machines get the identities they ask for, as Azure gives them: a
// system-assigned one is granted Contributor on the cluster's resource
// group (refused, saying what to grant, while the manager may not assign
// roles), a user-assigned one is attached, and each machine's azure.json
// names the identity its Instance Metadata Service issues tokens for. A
// machine with none, in a cluster without an identity, is told its cloud
// provider would have no credentials, and its IMDS indeed has no token.
func TestMachineIdentitiesAsAzureGivesThem(t *testing.T) {
	parallel(t)
	w := newEntraWorld(t)
	mgr, secret := w.principal(t, "winkube-manager", subscription)
	cfg := w.cfg
	cfg.Credential = w.credential(t, mgr, secret)
	stop := startControllers(t, cfg)
	defer stop()
	f := newCluster(t, "ids")
	f.waitClusterProvisioned(time.Minute)
	rgScope := "/subscriptions/" + subscription + "/resourceGroups/" + f.ns

	// A Contributor may not assign roles.
	f.newMachineWith("ids-md-refused-aaaaa", false, false, "1", nil, func(s *infrav1.AzureMachineSpec) { s.Identity = infrav1.VMIdentitySystemAssigned })
	msg := waitMachineReason(t, f, "ids-md-refused-aaaaa", controllers.RoleAssignmentFailedReason)
	if !strings.Contains(msg, "User Access Administrator") || !strings.Contains(msg, rgScope) || !strings.Contains(msg, "AuthorizationFailed") {
		t.Errorf("refused role assignment: %q", msg)
	}

	// The refused machine's VM has its identity, with no role: its cloud
	// provider gets a token from IMDS, and ARM refuses what it asks.
	refusedIMDS := machineIMDS(t, w, "ids-md-refused-aaaaa")
	expectWarning(t, "system-assigned without its role", runCCM(t, w, f.ns, "ids-md-refused-aaaaa", refusedIMDS, machineAzureJSON(t, f, "ids-md-refused-aaaaa")), "no role", "AuthorizationFailed", "Microsoft.Network/")

	// Granted the right to, the manager gives a new machine's identity its role.
	if err := w.dir.AssignRole(mgr.ObjectID, "User Access Administrator", "/subscriptions/"+subscription); err != nil {
		t.Fatal(err)
	}
	f.newMachineWith("ids-md-system-bbbbb", false, false, "1", nil, func(s *infrav1.AzureMachineSpec) { s.Identity = infrav1.VMIdentitySystemAssigned })
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := armmsi.NewUserAssignedIdentitiesClient(subscription, cfg.Credential, opts)
	groups, _ := armresources.NewResourceGroupsClient(subscription, cfg.Credential, opts)
	if _, err := groups.CreateOrUpdate(f.ctx, f.ns+"-ids", armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatal(err)
	}
	ccm, err := ids.CreateOrUpdate(f.ctx, f.ns+"-ids", "ccm", armmsi.Identity{Location: to.Ptr("westeurope")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.newMachineWith("ids-md-user-ccccc", false, false, "1", nil, func(s *infrav1.AzureMachineSpec) {
		s.Identity, s.UserAssignedIdentities = infrav1.VMIdentityUserAssigned, []infrav1.UserAssignedIdentity{{ProviderID: "azure://" + *ccm.ID}}
	})
	f.newMachine("ids-md-none-ddddd", false, false, "1")
	ams := f.waitMachinesProvisioned(2*time.Minute, "ids-md-system-bbbbb", "ids-md-user-ccccc", "ids-md-none-ddddd")

	az := newAzure(t, cfg)
	vm, err := az.vms.Get(f.ctx, f.ns, "ids-md-system-bbbbb", nil)
	if err != nil || vm.Identity == nil || vm.Identity.PrincipalID == nil {
		t.Fatalf("the SystemAssigned VM has no principal: %+v %v", vm.Identity, err)
	}
	principal := *vm.Identity.PrincipalID
	roles, _ := armauthorization.NewRoleAssignmentsClient(subscription, cfg.Credential, opts)
	name := roleassignments.Name(principal, roleassignments.DefinitionID(subscription, roleassignments.ContributorRole), rgScope)
	got, err := roles.Get(f.ctx, rgScope, name, nil)
	if err != nil || !strings.HasSuffix(*got.Properties.RoleDefinitionID, roleassignments.ContributorRole) || *got.Properties.PrincipalID != principal {
		t.Fatalf("the identity's role assignment at %s: %+v %v", rgScope, got.Properties, err)
	}
	user, err := az.vms.Get(f.ctx, f.ns, "ids-md-user-ccccc", nil)
	if err != nil || user.Identity == nil || len(user.Identity.UserAssignedIdentities) != 1 {
		t.Fatalf("the UserAssigned VM's identities: %+v %v", user.Identity, err)
	}

	// azure.json names each machine's identity.
	for name, want := range map[string]azurejson.Config{
		"ids-md-system-bbbbb": {UseManagedIdentityExtension: true},
		"ids-md-user-ccccc":   {UseManagedIdentityExtension: true, UserAssignedIdentityID: *ccm.Properties.ClientID},
	} {
		var cfgFile azurejson.Config
		env.Until(t, time.Minute, func(r client.Reader) string {
			s := &corev1.Secret{}
			if err := r.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name + azurejson.SecretSuffix}, s); err != nil {
				return err.Error()
			}
			if err := json.Unmarshal(s.Data[azurejson.WorkerNodeKey], &cfgFile); err != nil {
				return err.Error()
			}
			if cfgFile.UseManagedIdentityExtension != want.UseManagedIdentityExtension || cfgFile.UserAssignedIdentityID != want.UserAssignedIdentityID || cfgFile.AADClientSecret != "" {
				return fmt.Sprintf("%s's azure.json: managed identity %v, user-assigned %q", name, cfgFile.UseManagedIdentityExtension, cfgFile.UserAssignedIdentityID)
			}
			return ""
		})
	}

	// What the node's cloud provider would get from its IMDS.
	imds := map[string]string{}
	for _, m := range w.rt.Running() {
		imds[m.Name] = m.IMDS
	}
	if code, body := imdsToken(t, imds["ids-md-system-bbbbb"], ""); code != http.StatusOK {
		t.Errorf("IMDS of the SystemAssigned VM: %d %s", code, body)
	}
	if code, body := imdsToken(t, imds["ids-md-user-ccccc"], *ccm.Properties.ClientID); code != http.StatusOK {
		t.Errorf("IMDS of the UserAssigned VM for its identity: %d %s", code, body)
	}
	if code, body := imdsToken(t, imds["ids-md-none-ddddd"], ""); code != http.StatusBadRequest || !strings.Contains(body, "Identity not found") {
		t.Errorf("IMDS of a VM without an identity: %d %s", code, body)
	}
	// Each machine's cloud provider, as its azure.json says.
	spJSON := editJSON(t, machineAzureJSON(t, f, "ids-md-none-ddddd"), func(c *azurejson.Config) {
		c.UseManagedIdentityExtension, c.TenantID, c.AADClientID, c.AADClientSecret = false, mgr.TenantID, mgr.ClientID, secret
	})
	if got := runCCM(t, w, f.ns, "ids-md-none-ddddd", imds["ids-md-none-ddddd"], spJSON); got.ip == "" {
		t.Errorf("service principal: the Service stayed <pending>: %s", got.warning)
	}
	badSecret := editJSON(t, spJSON, func(c *azurejson.Config) { c.AADClientSecret = "not-" + secret })
	expectWarning(t, "service principal with a wrong secret", runCCM(t, w, f.ns, "ids-md-none-ddddd", imds["ids-md-none-ddddd"], badSecret), "refused the service principal's secret", "AADSTS7000215")
	if got := runCCM(t, w, f.ns, "ids-md-system-bbbbb", imds["ids-md-system-bbbbb"], machineAzureJSON(t, f, "ids-md-system-bbbbb")); got.ip == "" {
		t.Errorf("system-assigned with its role: the Service stayed <pending>: %s", got.warning)
	}
	// A user-assigned identity has the roles its owner gives it.
	if err := w.dir.AssignRole(*ccm.Properties.PrincipalID, "Contributor", rgScope); err != nil {
		t.Fatal(err)
	}
	if got := runCCM(t, w, f.ns, "ids-md-user-ccccc", imds["ids-md-user-ccccc"], machineAzureJSON(t, f, "ids-md-user-ccccc")); got.ip == "" {
		t.Errorf("user-assigned, attached: the Service stayed <pending>: %s", got.warning)
	}
	// What CAPZ writes for a UserAssignedMSI cluster identity on machines
	// with none: the identity is not on the VM.
	notAttached := editJSON(t, machineAzureJSON(t, f, "ids-md-none-ddddd"), func(c *azurejson.Config) { c.UserAssignedIdentityID = *ccm.Properties.ClientID })
	expectWarning(t, "user-assigned, not attached", runCCM(t, w, f.ns, "ids-md-none-ddddd", imds["ids-md-none-ddddd"], notAttached), "not attached to the VM",
		"the requested identity isn't assigned to this resource", "Identity not found")
	expectWarning(t, "no identity", runCCM(t, w, f.ns, "ids-md-none-ddddd", imds["ids-md-none-ddddd"], machineAzureJSON(t, f, "ids-md-none-ddddd")), "has none",
		"failed to authenticate a system assigned identity", "Identity not found")
	// With no credential at all the controller manager never becomes
	// Ready (the kubelet's component check): no Service event to see.

	none := ams["ids-md-none-ddddd"]
	if c := meta.FindStatusCondition(none.Status.Conditions, controllers.CloudProviderCredentialsCondition); c == nil || c.Reason != controllers.NoCloudProviderCredentialsReason || !strings.Contains(c.Message, "identity: SystemAssigned") {
		t.Errorf("the machine without an identity: CloudProviderCredentials %+v", c)
	}
	if c := meta.FindStatusCondition(ams["ids-md-system-bbbbb"].Status.Conditions, controllers.CloudProviderCredentialsCondition); c == nil || c.Status != "True" {
		t.Errorf("the SystemAssigned machine: CloudProviderCredentials %+v", c)
	}

	// The assignment goes with its machine.
	f.deleteAndWait(time.Minute, ams["ids-md-system-bbbbb"])
	if _, err := roles.Get(f.ctx, rgScope, name, nil); err == nil {
		t.Error("the role assignment outlived its machine")
	}
}

// machineIMDS is the IMDS of a machine's VM, once it runs.
func machineIMDS(t *testing.T, w *entraWorld, name string) string {
	t.Helper()
	var url string
	poll.Until(t, time.Minute, func() string {
		for _, m := range w.rt.Running() {
			if m.Name == name && m.IMDS != "" {
				url = m.IMDS
				return ""
			}
		}
		return name + "'s VM does not run"
	})
	return url
}

// imdsToken asks a machine's Instance Metadata Service for an ARM token,
// as azidentity's managed-identity credential does.
func imdsToken(t *testing.T, base, clientID string) (int, string) {
	t.Helper()
	if base == "" {
		t.Fatal("the machine has no IMDS")
	}
	q := url.Values{"api-version": {"2018-02-01"}, "resource": {"https://management.azure.com/"}}
	if clientID != "" {
		q.Set("client_id", clientID)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/metadata/identity/oauth2/token?"+q.Encode(), nil)
	req.Header.Set("Metadata", "true")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
