package controllers_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/roleassignments"
	"github.com/winkube/winkube/internal/controllers"
)

// tenantNS is a team of a shared management cluster: a user whose only
// rights are a Role in its own namespace over Cluster API's and winkube's
// objects (not their status) and Secrets.
type tenantNS struct {
	ns string
	c  client.Client
}

func newTenant(t *testing.T, prefix string) *tenantNS {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	ownNamespace(t, ns.Name)
	c := tenantIn(t, ns.Name)
	// The Role reaches only its own namespace.
	if err := c.List(t.Context(), &infrav1.AzureClusterIdentityList{}, client.InNamespace("default")); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant may list identities elsewhere: %v", err)
	}
	return &tenantNS{ns: ns.Name, c: c}
}

// cluster creates, as the tenant, a Cluster and its AzureCluster named
// name, with annotations and a change to the spec.
func (tn *tenantNS) cluster(t *testing.T, name string, annotations map[string]string, mutate func(*infrav1.AzureClusterSpec)) *infrav1.AzureCluster {
	t.Helper()
	cluster := capiCluster(name, tn.ns)
	if err := tn.c.Create(t.Context(), cluster); err != nil {
		t.Fatal(err)
	}
	ac := &infrav1.AzureCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: tn.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: name}, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: name, UID: cluster.UID}},
		},
		Spec: infrav1.AzureClusterSpec{SubscriptionID: subscription, Location: "westeurope", ResourceGroup: tn.ns},
	}
	if mutate != nil {
		mutate(&ac.Spec)
	}
	if err := tn.c.Create(t.Context(), ac); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Paused, so that later tests' controllers leave it alone.
		c := &clusterv1.Cluster{}
		if env.Client.Get(t.Context(), client.ObjectKeyFromObject(cluster), c) == nil {
			patch := client.MergeFrom(c.DeepCopy())
			c.Spec.Paused = to.Ptr(true)
			_ = env.Client.Patch(t.Context(), c, patch)
		}
	})
	return ac
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A tenant who lists another namespace's Azure resources in the records of
// its own objects (the annotations clusterctl move carries), or names its
// cluster like another namespace's and points it at that cluster's
// resource group, then deletes its objects, deletes nothing of the other
// cluster's; once its object exists, it may not change the records at all.
func TestTenantCannotHaveAnotherNamespacesResourcesDeleted(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	az := newAzure(t, armCfg)
	victim := newCluster(t, "demo")
	victim.waitClusterProvisioned(time.Minute)
	victim.newMachine("demo-cp-aaaaa", true, false, "1")
	vam := victim.waitMachinesProvisioned(2*time.Minute, "demo-cp-aaaaa")["demo-cp-aaaaa"]
	_, vpool := victim.newPool("demo-pool", 1, false)
	victim.waitPool(vpool, 1)
	rg := victim.ns
	vnets, _ := armnetwork.NewVirtualNetworksClient(subscription, armCfg.Credential, mustOptions(t))
	vnet, err := vnets.Get(t.Context(), rg, victim.ac.Spec.NetworkSpec.Vnet.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	forged := slices.Clone(vam.Status.CreatedResources)
	for _, sn := range vnet.Properties.Subnets {
		forged = append(forged, *sn.ID)
	}
	if !slices.ContainsFunc(forged, func(id string) bool { return strings.Contains(id, "/disks/") }) ||
		!slices.ContainsFunc(forged, func(id string) bool { return strings.Contains(id, "/inboundNatRules/") }) {
		t.Fatalf("the victim's machine recorded no OS disk or NAT rule: %v", forged)
	}
	before := az.inventory(rg)
	lb, err := az.lbs.Get(t.Context(), rg, victim.ac.Spec.NetworkSpec.APIServerLB.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	natRules := len(lb.Properties.InboundNatRules)

	unchanged := func(t *testing.T) {
		t.Helper()
		if after := az.inventory(rg); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("the victim's group changed:\nbefore %v\nafter  %v", before, after)
		}
		vnet, err := vnets.Get(t.Context(), rg, victim.ac.Spec.NetworkSpec.Vnet.Name, nil)
		if err != nil || len(vnet.Properties.Subnets) != 2 {
			t.Fatalf("the victim's subnets: %v", err)
		}
		lb, err := az.lbs.Get(t.Context(), rg, victim.ac.Spec.NetworkSpec.APIServerLB.Name, nil)
		if err != nil || len(lb.Properties.InboundNatRules) != natRules {
			t.Fatalf("the victim's NAT rules: %v", err)
		}
	}

	t.Run("forged records", func(t *testing.T) {
		tn := newTenant(t, "thief")
		records := map[string]string{infrav1.CreatedResourcesAnnotation: jsonOf(t, forged)}
		ac := tn.cluster(t, "thief", records, nil)
		// A machine with its finalizer set by the tenant, so that its
		// deletion is the controller's.
		am := &infrav1.AzureMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "thief", Namespace: tn.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "thief"},
				Annotations: records, Finalizers: []string{infrav1.MachineFinalizer}},
			Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3"}},
		}
		if err := tn.c.Create(t.Context(), am); err != nil {
			t.Fatal(err)
		}
		env.Until(t, time.Minute, func(r client.Reader) string {
			if err := r.Get(t.Context(), client.ObjectKeyFromObject(ac), ac); err != nil {
				return err.Error()
			}
			if c := conditions.Get(ac, controllers.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Sprintf("the tenant's cluster is not provisioned: %+v", c)
			}
			return ""
		})

		// Once the object exists, records change only by the manager's hand.
		patch := client.MergeFrom(ac.DeepCopy())
		ac.Annotations[infrav1.CreatedResourcesAnnotation] = jsonOf(t, append(slices.Clone(forged), "/subscriptions/"+subscription+"/resourceGroups/"+rg+"/providers/Microsoft.Compute/virtualMachines/more"))
		if err := tn.c.Patch(t.Context(), ac, patch); err == nil || !strings.Contains(err.Error(), "only winkube's manager changes them") {
			t.Errorf("the tenant changed its AzureCluster's records: %v", err)
		}

		for _, o := range []client.Object{am, ac} {
			if err := tn.c.Delete(t.Context(), o); err != nil {
				t.Fatal(err)
			}
			waitGone(t, o)
		}
		unchanged(t)
		var dropped int
		events := &corev1.EventList{}
		if err := env.Client.List(t.Context(), events, client.InNamespace(tn.ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Reason == controllers.RecordDroppedReason {
				dropped++
			}
		}
		if dropped == 0 {
			t.Error("no RecordDropped event tells the tenant its records were forgotten")
		}
	})

	t.Run("forged scale-set instance", func(t *testing.T) {
		tn := newTenant(t, "instance")
		// Of the tenant's own cluster, so that the manager acts as that
		// cluster's credential: the instance is refused for being
		// another namespace's, not for want of an identity.
		own := tn.cluster(t, "own", nil, nil)
		m := &infrav1.AzureMachinePoolMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "thief", Namespace: tn.ns, Finalizers: []string{infrav1.MachinePoolMachineFinalizer},
				Labels: map[string]string{clusterv1.ClusterNameLabel: own.Name}},
			Spec: infrav1.AzureMachinePoolMachineSpec{ProviderID: vpool.Spec.ProviderIDList[0], InstanceID: "0"},
		}
		if err := tn.c.Create(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		if err := tn.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m)
		if got := az.instances(rg, vpool.Name); len(got) != 1 {
			t.Fatalf("the victim's scale set has %d instances", len(got))
		}
	})

	t.Run("same-named cluster", func(t *testing.T) {
		tn := newTenant(t, "twin")
		ac := tn.cluster(t, "demo", nil, func(s *infrav1.AzureClusterSpec) { s.ResourceGroup = rg })
		env.Until(t, time.Minute, func(r client.Reader) string {
			if err := r.Get(t.Context(), client.ObjectKeyFromObject(ac), ac); err != nil {
				return err.Error()
			}
			if c := conditions.Get(ac, controllers.ReadyCondition); c == nil || c.Reason != controllers.ResourceNotOwnedReason || !strings.Contains(c.Message, "another namespace") {
				return fmt.Sprintf("the same-named cluster is not refused the victim's group: %+v", c)
			}
			return ""
		})
		if err := tn.c.Delete(t.Context(), ac); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ac)
		unchanged(t)
	})

	// A disk left behind by a VM that is gone (kept by its team, as Azure
	// keeps an OS disk by default) carries no tags, and its name is all a
	// record could prove: recording that VM and its disk deletes nothing.
	t.Run("disk of a gone VM", func(t *testing.T) {
		vmID := "/subscriptions/" + subscription + "/resourceGroups/" + rg + "/providers/Microsoft.Compute/virtualMachines/kept"
		diskID := "/subscriptions/" + subscription + "/resourceGroups/" + rg + "/providers/Microsoft.Compute/disks/kept_OSDisk"
		dp, err := az.res.BeginCreateOrUpdateByID(t.Context(), diskID, "2023-04-02", armresources.GenericResource{Location: to.Ptr("westeurope"),
			Properties: map[string]any{"osType": "Linux", "creationData": map[string]any{"createOption": "Empty"}, "diskSizeGB": 32}}, nil)
		done(t, dp, err)
		t.Cleanup(func() {
			if p, err := az.disks.BeginDelete(context.Background(), rg, "kept_OSDisk", nil); err == nil {
				_, _ = p.PollUntilDone(context.Background(), nil)
			}
		})
		tn := newTenant(t, "disk")
		own := tn.cluster(t, "own", nil, nil)
		am := &infrav1.AzureMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "thief", Namespace: tn.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: own.Name},
				Annotations: map[string]string{infrav1.CreatedResourcesAnnotation: jsonOf(t, []string{vmID, diskID})}, Finalizers: []string{infrav1.MachineFinalizer}},
			Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3"}},
		}
		if err := tn.c.Create(t.Context(), am); err != nil {
			t.Fatal(err)
		}
		if err := tn.c.Delete(t.Context(), am); err != nil {
			t.Fatal(err)
		}
		waitGone(t, am)
		if d, err := az.disks.Get(t.Context(), rg, "kept_OSDisk", nil); err != nil {
			t.Fatalf("the disk a gone VM left behind: %v", err)
		} else if d.ManagedBy != nil {
			t.Fatalf("the disk is attached to %s", *d.ManagedBy)
		}
	})
}

// A tenant's recorded operation whose resume token polls a server of its
// own is dropped, not resumed: that server never sees a request (nor the
// manager's ARM token), and the cluster is built all the same.
func TestForgedResumeTokenNeverLeavesTheARMEndpoint(t *testing.T) {
	parallel(t)
	var mu sync.Mutex
	var got []string
	thief := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.String()+" authorization="+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"InProgress"}`))
	}))
	defer thief.Close()
	// The manager trusts the thief's certificate, as it would trust a real
	// server's publicly signed one.
	cfg := armCfg
	cfg.CACertPEM = append(append([]byte(nil), armCfg.CACertPEM...), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: thief.Certificate().Raw})...)
	stop := startControllers(t, cfg)
	defer stop()

	tn := newTenant(t, "resume")
	const nsg = "tok-cp-nsg"
	token := jsonOf(t, map[string]any{"type": "SecurityGroupsClientCreateOrUpdateResponse", "token": map[string]any{
		"asyncURL": thief.URL + "/steal", "locURL": "", "origURL": thief.URL + "/orig", "method": "PUT", "finalState": "", "state": "InProgress",
	}})
	futures := infrav1.Futures{{Type: "PUT", ServiceName: "securitygroups", Name: nsg, ResourceGroup: tn.ns, Data: token}}
	ac := tn.cluster(t, "tok", map[string]string{infrav1.OperationsAnnotation: jsonOf(t, futures)}, func(s *infrav1.AzureClusterSpec) {
		s.NetworkSpec.Subnets = []infrav1.SubnetSpec{
			{Name: "tok-cp", Role: infrav1.SubnetControlPlane, CIDRBlocks: []string{"10.0.0.0/16"}, SecurityGroup: infrav1.SecurityGroup{Name: nsg}},
			{Name: "tok-nodes", Role: infrav1.SubnetNode, CIDRBlocks: []string{"10.1.0.0/16"}, SecurityGroup: infrav1.SecurityGroup{Name: "tok-node-nsg"}},
		}
	})
	env.Until(t, time.Minute, func(r client.Reader) string {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			return ""
		}
		if err := r.Get(t.Context(), client.ObjectKeyFromObject(ac), ac); err != nil {
			return err.Error()
		}
		if c := conditions.Get(ac, controllers.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Sprintf("the cluster is not provisioned: %+v", c)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Fatalf("the manager polled the tenant's server: %v", got)
	}
}

// A machine's systemAssignedIdentityRole cannot adopt an assignment that is
// someone else's (named by the tenant), nor have the manager grant a role
// outside the cluster's resource group unless the operator allowed that
// scope; the foreign assignment outlives the machine.
func TestMachineRoleAssignmentsAreProvablyItsOwn(t *testing.T) {
	parallel(t)
	w, mgr, cfg := roleGrantingManager(t)
	other, _ := w.principal(t, "someone-else", subscription)
	stop := startControllersWith(t, cfg, nil)
	defer stop()
	// The tenant's cluster, made by the admin fixture; its machines by the tenant.
	f := newCluster(t, "roles")
	f.waitClusterProvisioned(time.Minute)
	tn := &tenantNS{ns: f.ns, c: tenantIn(t, f.ns)}
	rgScope := "/subscriptions/" + subscription + "/resourceGroups/" + f.ns
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	roles, _ := armauthorization.NewRoleAssignmentsClient(subscription, cfg.Credential, opts)
	const foreign = "0b7a1a8e-0000-4000-8000-00000000f0e1"
	contributor := roleassignments.DefinitionID(subscription, roleassignments.ContributorRole)
	if _, err := roles.Create(f.ctx, rgScope, foreign, armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		RoleDefinitionID: to.Ptr(contributor), PrincipalID: to.Ptr(other.ObjectID), PrincipalType: to.Ptr(armauthorization.PrincipalTypeServicePrincipal),
	}}, nil); err != nil {
		t.Fatal(err)
	}

	// Naming someone else's assignment.
	adopt := f.newMachineVia(tn.c, "roles-md-adopt-aaaaa", false, false, "1", nil, func(s *infrav1.AzureMachineSpec) {
		s.Identity = infrav1.VMIdentitySystemAssigned
		s.SystemAssignedIdentityRole = &infrav1.SystemAssignedIdentityRole{Name: foreign}
	})
	if msg := waitMachineReason(t, f, adopt.Name, controllers.RoleAssignmentFailedReason); !strings.Contains(msg, "grants another principal") {
		t.Errorf("adopting a foreign assignment: %q", msg)
	}
	// The subscription, which the operator did not allow.
	wide := f.newMachineVia(tn.c, "roles-md-wide-bbbbb", false, false, "1", nil, func(s *infrav1.AzureMachineSpec) {
		s.Identity = infrav1.VMIdentitySystemAssigned
		s.SystemAssignedIdentityRole = &infrav1.SystemAssignedIdentityRole{Scope: "/subscriptions/" + subscription}
	})
	if msg := waitMachineReason(t, f, wide.Name, controllers.RoleAssignmentFailedReason); !strings.Contains(msg, "outside the cluster's resource group") {
		t.Errorf("a role on the subscription: %q", msg)
	}
	pager := roles.NewListForScopePager("/subscriptions/"+subscription, &armauthorization.RoleAssignmentsClientListForScopeOptions{})
	for pager.More() {
		page, err := pager.NextPage(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page.Value {
			if strings.EqualFold(*a.Properties.Scope, "/subscriptions/"+subscription) && *a.Properties.PrincipalID != mgr.ObjectID && *a.Properties.PrincipalID != other.ObjectID {
				t.Errorf("the manager granted a role on the subscription: %+v", *a.Properties)
			}
		}
	}

	for _, am := range []*infrav1.AzureMachine{adopt, wide} {
		if err := tn.c.Delete(f.ctx, am); err != nil {
			t.Fatal(err)
		}
		waitGone(t, am)
	}
	a, err := roles.Get(f.ctx, rgScope, foreign, nil)
	if err != nil || *a.Properties.PrincipalID != other.ObjectID {
		t.Fatalf("the foreign assignment did not survive the machine that named it: %v", err)
	}
}

// A scope the operator allowed is granted.
func TestMachineRoleAtAnAllowedScope(t *testing.T) {
	parallel(t)
	_, _, cfg := roleGrantingManager(t)
	subScope := "/subscriptions/" + subscription
	stop := startControllersWith(t, cfg, func(o *controllers.Options) { o.RoleAssignmentScopes = []string{subScope} })
	defer stop()
	f := newCluster(t, "allowed")
	f.waitClusterProvisioned(time.Minute)
	am := f.newMachineVia(tenantIn(t, f.ns), "allowed-md-ccccc", false, false, "1", nil, func(s *infrav1.AzureMachineSpec) {
		s.Identity = infrav1.VMIdentitySystemAssigned
		s.SystemAssignedIdentityRole = &infrav1.SystemAssignedIdentityRole{Scope: subScope}
	})
	f.waitMachinesProvisioned(2*time.Minute, am.Name)
}

// tenantIn is a tenant's client for an existing namespace.
func tenantIn(t *testing.T, ns string) client.Client {
	t.Helper()
	user := "tenant-" + ns
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"azureclusters", "azuremachines", "azuremachinepools", "azuremachinepoolmachines", "azuremachinetemplates"}, Verbs: []string{"*"}},
		{APIGroups: []string{clusterv1.GroupVersion.Group}, Resources: []string{"clusters", "machines", "machinedeployments"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(t.Context(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A tenant cannot build its cluster in another cluster's resource group or
// VNet by naming it in its spec as if it had brought it: a group or VNet
// that another winkube cluster (here another namespace's) tagged is
// refused before anything is written there, whether it is the cluster's
// group, the VNet's group, or a VNet another cluster made in a group a user
// brought.
func TestTenantCannotBuildInAnotherClustersGroupOrVNet(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	az := newAzure(t, armCfg)
	vnets, _ := armnetwork.NewVirtualNetworksClient(subscription, armCfg.Credential, mustOptions(t))
	victim := newCluster(t, "victim")
	victim.waitClusterProvisioned(time.Minute)
	// A second victim, in a group a user brought, makes its own VNet there.
	shared := "shared-" + victim.ns
	if _, err := az.groups.CreateOrUpdate(t.Context(), shared, armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatal(err)
	}
	byo := newCluster(t, "byovictim", func(s *infrav1.AzureClusterSpec) { s.ResourceGroup = shared })
	byo.waitClusterProvisioned(time.Minute)

	subnetsOf := func(rg, name string) int {
		t.Helper()
		v, err := vnets.Get(t.Context(), rg, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(v.Properties.Subnets)
	}
	victimVNet, byoVNet := victim.ac.Spec.NetworkSpec.Vnet.Name, byo.ac.Spec.NetworkSpec.Vnet.Name
	before := az.inventory(victim.ns)
	victimSubnets, byoSubnets := subnetsOf(victim.ns, victimVNet), subnetsOf(shared, byoVNet)
	tn := newTenant(t, "evil")
	refused := func(t *testing.T, f *fixture, what string) {
		t.Helper()
		c := f.waitReadyReason(controllers.ResourceNotOwnedReason)
		if !strings.Contains(c.Message, what+" belongs to another winkube cluster") || strings.Contains(c.Message, "_victim") || strings.Contains(c.Message, "_byovictim") {
			t.Errorf("the refusal does not say what is wrong, or names the other cluster: %s", c.Message)
		}
		if ptr.Deref(f.ac.Status.Initialization.Provisioned, false) {
			t.Error("a refused cluster was reported provisioned")
		}
	}
	ownSubnets := func(prefix string) []infrav1.SubnetSpec {
		return []infrav1.SubnetSpec{
			{Name: prefix + "-cp", Role: infrav1.SubnetControlPlane, CIDRBlocks: []string{"10.2.0.0/16"}},
			{Name: prefix + "-nodes", Role: infrav1.SubnetNode, CIDRBlocks: []string{"10.3.0.0/16"}},
		}
	}

	t.Run("the cluster's group", func(t *testing.T) {
		f, err := tn.clusterFixture(t, "evil", func(s *infrav1.AzureClusterSpec) { s.ResourceGroup = victim.ns })
		if err != nil {
			t.Fatal(err)
		}
		refused(t, f, "resource group "+victim.ns)
	})
	t.Run("the VNet's group", func(t *testing.T) {
		f, err := tn.clusterFixture(t, "evilnet", func(s *infrav1.AzureClusterSpec) {
			// A VNet of its own, made in the victim's group.
			s.NetworkSpec.Vnet = infrav1.VnetSpec{Name: "evilnet-vnet", ResourceGroup: victim.ns, CIDRBlocks: []string{"10.0.0.0/12"}}
			s.NetworkSpec.Subnets = ownSubnets("evilnet")
		})
		if err != nil {
			t.Fatal(err)
		}
		refused(t, f, "resource group "+victim.ns)
	})
	t.Run("the victim's VNet", func(t *testing.T) {
		f, err := tn.clusterFixture(t, "evilvnet", func(s *infrav1.AzureClusterSpec) {
			s.ResourceGroup = tn.ns + "-vnet" // not evilnet's
			s.NetworkSpec.Vnet = infrav1.VnetSpec{Name: victimVNet, ResourceGroup: victim.ns, CIDRBlocks: []string{"10.0.0.0/12"}}
			s.NetworkSpec.Subnets = ownSubnets("evilvnet")
		})
		if err != nil {
			t.Fatal(err)
		}
		refused(t, f, "VNet "+victimVNet)
	})
	t.Run("a VNet in a user's group", func(t *testing.T) {
		f, err := tn.clusterFixture(t, "evilbyo", func(s *infrav1.AzureClusterSpec) {
			s.ResourceGroup = shared
			s.NetworkSpec.Vnet = infrav1.VnetSpec{Name: byoVNet, CIDRBlocks: []string{"10.0.0.0/12"}}
			s.NetworkSpec.Subnets = ownSubnets("evilbyo")
		})
		if err != nil {
			t.Fatal(err)
		}
		refused(t, f, "VNet "+byoVNet)
	})

	if after := az.inventory(victim.ns); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the victim's group changed:\nbefore %v\nafter  %v", before, after)
	}
	if n := subnetsOf(victim.ns, victimVNet); n != victimSubnets {
		t.Errorf("the victim's VNet has %d subnets, had %d", n, victimSubnets)
	}
	if n := subnetsOf(shared, byoVNet); n != byoSubnets {
		t.Errorf("the VNet the second victim made in the user's group has %d subnets, had %d", n, byoSubnets)
	}
}

// A machine whose AzureCluster names another cluster's group (the
// tenant's Cluster, provisioned, repointed at a second AzureCluster, which
// Cluster API allows) is not granted its system-assigned identity's role
// there: the group is the cluster's only when its tags say so.
func TestMachineRoleNeverInAnotherClustersGroup(t *testing.T) {
	parallel(t)
	_, mgr, cfg := roleGrantingManager(t)
	stop := startControllersWith(t, cfg, nil)
	defer stop()

	victim := newCluster(t, "victim")
	victim.waitClusterProvisioned(time.Minute)
	evil := newCluster(t, "evil")
	evil.waitClusterProvisioned(time.Minute) // Cluster API: infrastructureProvisioned
	tn := &tenantNS{ns: evil.ns, c: tenantIn(t, evil.ns)}
	repointed := repointCluster(t, tn, evil, victim)
	// Its reconcile refuses it, and machines wait for an AzureCluster that
	// is not provisioned (TestTenantRepointedClusterCannotUseAnotherClustersLoadBalancer);
	// its status forged as provisioned (a tenant whose role covers the
	// status) takes the machine on to its role, which must still be refused.
	forgeProvisioned(t, repointed)
	am := evil.newMachineVia(tn.c, "evil-md-aaaaa", false, false, "1", nil, func(s *infrav1.AzureMachineSpec) {
		s.Identity = infrav1.VMIdentitySystemAssigned
	})
	if msg := waitMachineReason(t, evil, am.Name, controllers.ResourceNotOwnedReason); !strings.Contains(msg, "resource group "+victim.ns+" belongs to another winkube cluster") {
		t.Errorf("the machine does not say why its identity has no role: %s", msg)
	}

	victimScope := "/subscriptions/" + subscription + "/resourceGroups/" + victim.ns
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	roles, _ := armauthorization.NewRoleAssignmentsClient(subscription, cfg.Credential, opts)
	pager := roles.NewListForScopePager(victimScope, &armauthorization.RoleAssignmentsClientListForScopeOptions{})
	for pager.More() {
		page, err := pager.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page.Value {
			if strings.EqualFold(*a.Properties.Scope, victimScope) && *a.Properties.PrincipalID != mgr.ObjectID {
				t.Errorf("the tenant's VM identity was granted a role on the victim's group: %+v", *a.Properties)
			}
		}
	}
}

// A tenant's AzureMachinePoolMachine that names, through its pool label, a
// pool of its own named like another namespace's scale set, in a cluster
// whose resourceGroup is that namespace's, learns nothing of the other
// instance (its computer name and address stay out of the tenant's
// status), and the manager runs no Run Command on it at the bootstrap
// deadline: the scale set is not the pool's (its role tag says whose it
// is).
func TestTenantPoolMachineCannotReachAnotherNamespacesInstance(t *testing.T) {
	parallel(t)
	rt := &arm.RecordingRuntime{}
	rt.Answer = func(id string, c arm.Command) (arm.CommandResult, error) {
		return arm.CommandResult{Stdout: "VICTIM-LOG-LINE from " + id + "\nerror execution phase preflight: boom\n"}, nil
	}
	_, cfg := newEmulator(t, arm.Options{Runtime: rt})
	const deadline = 3 * time.Second
	stop := startControllersWith(t, cfg, func(o *controllers.Options) { o.PoolBootstrapTimeout = deadline })
	defer stop()
	az := newAzure(t, cfg)
	victim := newCluster(t, "victim")
	victim.waitClusterProvisioned(time.Minute)
	_, vpool := victim.newPool("victim-pool", 1, false)
	victim.waitPool(vpool, 1)
	inst := az.instances(victim.ns, vpool.Name)
	if len(inst) != 1 {
		t.Fatalf("victim instances %v", inst)
	}
	before := len(rt.Commands())

	evil := newCluster(t, "evil", func(s *infrav1.AzureClusterSpec) { s.ResourceGroup = victim.ns })
	tn := &tenantNS{ns: evil.ns, c: tenantIn(t, evil.ns)}
	amp := &infrav1.AzureMachinePool{ObjectMeta: metav1.ObjectMeta{Name: vpool.Name, Namespace: evil.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "evil"}},
		Spec: infrav1.AzureMachinePoolSpec{Template: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}}}
	if err := tn.c.Create(t.Context(), amp); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "evil-bs", Namespace: evil.ns}, Data: map[string][]byte{"value": []byte("x")}}
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "evil-ampm", Namespace: evil.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "evil"}},
		Spec: clusterv1.MachineSpec{ClusterName: "evil", Version: "v1.36.3", Bootstrap: clusterv1.Bootstrap{DataSecretName: to.Ptr("evil-bs")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachinePoolMachine", Name: "evil-ampm"}}}
	for _, o := range []client.Object{secret, m} {
		if err := tn.c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	ampm := &infrav1.AzureMachinePoolMachine{ObjectMeta: metav1.ObjectMeta{Name: "evil-ampm", Namespace: evil.ns,
		Labels:          map[string]string{clusterv1.ClusterNameLabel: "evil", infrav1.MachinePoolNameLabel: vpool.Name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID}}},
		Spec: infrav1.AzureMachinePoolMachineSpec{InstanceID: inst[0].id, ProviderID: vpool.Spec.ProviderIDList[0]}}
	if err := tn.c.Create(t.Context(), ampm); err != nil {
		t.Fatal(err)
	}
	var refusedAt time.Time
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(t.Context(), client.ObjectKeyFromObject(ampm), ampm); err != nil {
			return err.Error()
		}
		if c := conditions.Get(ampm, controllers.BootstrapSucceededCondition); c != nil && strings.Contains(c.Message, "VICTIM-LOG-LINE") {
			return "" // the defect: reported below
		}
		if c := conditions.Get(ampm, controllers.ReadyCondition); c != nil && c.Reason == controllers.ResourceNotOwnedReason {
			if refusedAt.IsZero() {
				refusedAt = time.Now()
			}
			// Past the bootstrap deadline, with time for a Run Command.
			if time.Since(refusedAt) > 2*deadline {
				return ""
			}
			return "refused; waiting past the bootstrap deadline"
		}
		return fmt.Sprintf("waiting for the refusal: computerName %q, conditions %v", ampm.Status.ComputerName, conditionLines(ampm.Status.Conditions))
	})
	if c := conditions.Get(ampm, controllers.ReadyCondition); c == nil || c.Reason != controllers.ResourceNotOwnedReason || !strings.Contains(c.Message, "is not the scale set of AzureMachinePool "+vpool.Name) {
		t.Errorf("the object is not refused, saying why: %+v", c)
	}
	if ampm.Status.ComputerName != "" || len(ampm.Status.Addresses) != 0 {
		t.Errorf("the tenant's object mirrors the other namespace's instance: computerName %q, addresses %v", ampm.Status.ComputerName, ampm.Status.Addresses)
	}
	if c := conditions.Get(ampm, controllers.BootstrapSucceededCondition); c != nil {
		t.Errorf("the other namespace's instance was watched as the tenant's bootstrap: %s", c.Message)
	}
	if cmds := rt.Commands()[before:]; len(cmds) != 0 {
		t.Errorf("the manager ran %d Run Commands on another namespace's scale-set instance for a tenant's object", len(cmds))
	}
}

// A tenant whose Cluster is provisioned points its infrastructureRef at a
// second AzureCluster of its own naming another namespace's resource
// group, network and API load balancer (Cluster API lets the reference
// change and keeps InfrastructureProvisioned). Its control-plane machine
// waits for that AzureCluster, which its reconcile refuses; and should the
// AzureCluster read as provisioned anyway (a tenant whose role covers its
// status), the load balancer's tags still keep the machine's NAT rule and
// NIC off the other team's API load balancer.
func TestTenantRepointedClusterCannotUseAnotherClustersLoadBalancer(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	az := newAzure(t, armCfg)
	victim := newCluster(t, "victim")
	victim.waitClusterProvisioned(time.Minute)
	evil := newCluster(t, "evil")
	evil.waitClusterProvisioned(time.Minute)
	tn := &tenantNS{ns: evil.ns, c: tenantIn(t, evil.ns)}

	b := repointCluster(t, tn, evil, victim)
	am := evil.newMachineVia(tn.c, "evil-cp-bbbbb", true, false, "1", nil, nil)
	if msg := waitMachineReason(t, evil, am.Name, controllers.WaitingForClusterInfraReason); !strings.Contains(msg, b.Name) {
		t.Errorf("the machine waits, but not for AzureCluster %s: %q", b.Name, msg)
	}

	forgeProvisioned(t, b)
	if msg := waitMachineReason(t, evil, am.Name, controllers.ResourceNotOwnedReason); !strings.Contains(msg, victim.ac.Spec.NetworkSpec.APIServerLB.Name) {
		t.Errorf("the machine is refused, but not for the other team's load balancer: %q", msg)
	}
	lb, err := az.lbs.Get(evil.ctx, victim.ns, victim.ac.Spec.NetworkSpec.APIServerLB.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range lb.Properties.InboundNatRules {
		if strings.Contains(*r.Name, "evil") {
			t.Errorf("the tenant's machine added NAT rule %s to the other team's API load balancer", *r.Name)
		}
	}
	if inv := az.inventory(victim.ns); len(inv["networkInterfaces"]) > 0 || len(inv["virtualMachines"]) > 0 {
		t.Errorf("the tenant's machine made resources in the other team's group: %v", inv)
	}
}

// repointCluster has the tenant create a second AzureCluster, evil-b,
// with the victim's spec (its group, network and load balancer), and point
// its Cluster's infrastructureRef at it, which Cluster API allows.
func repointCluster(t *testing.T, tn *tenantNS, evil, victim *fixture) *infrav1.AzureCluster {
	t.Helper()
	b := &infrav1.AzureCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "evil-b", Namespace: evil.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: evil.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: evil.cluster.Name, UID: evil.cluster.UID}}},
		Spec: *victim.ac.Spec.DeepCopy(),
	}
	b.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{}
	b.Spec.IdentityRef = nil
	if err := tn.c.Create(evil.ctx, b); err != nil {
		t.Fatal(err)
	}
	c := &clusterv1.Cluster{}
	if err := tn.c.Get(evil.ctx, client.ObjectKeyFromObject(evil.cluster), c); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.InfrastructureRef.Name = b.Name
	if err := tn.c.Patch(evil.ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	evil.cluster = c
	return b
}

// forgeProvisioned marks an AzureCluster provisioned in its status, as a
// tenant whose role covers the status subresource may.
func forgeProvisioned(t *testing.T, ac *infrav1.AzureCluster) {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ac), ac); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ac.DeepCopy())
	ac.Status.Initialization.Provisioned = to.Ptr(true)
	if err := env.Client.Status().Patch(t.Context(), ac, patch); err != nil {
		t.Fatal(err)
	}
}

// roleGrantingManager is an emulated Entra ID with the manager's principal,
// which may grant roles in the subscription (User Access Administrator),
// and the ARM configuration that acts as it.
func roleGrantingManager(t *testing.T) (*entraWorld, entra.Principal, endpoint.Config) {
	t.Helper()
	w := newEntraWorld(t)
	mgr, secret := w.principal(t, "winkube-manager", subscription)
	if err := w.dir.AssignRole(mgr.ObjectID, "User Access Administrator", "/subscriptions/"+subscription); err != nil {
		t.Fatal(err)
	}
	cfg := w.cfg
	cfg.Credential = w.credential(t, mgr, secret)
	return w, mgr, cfg
}
