package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// TestNoIdentityRefNeedsUseMyAzureLogin: for an AzureCluster without an
// identityRef, whose spec a tenant may have written, 'machine create',
// 'machine delete' and 'logs --via run-command' do not act with the
// user's own Azure login unless --use-my-azure-login says so, and the
// refusal names the subscription, resource group and VNet they would act
// in. The refusal comes before any credential is looked for, so no real
// Azure is reached.
func TestNoIdentityRefNeedsUseMyAzureLogin(t *testing.T) {
	ctx := context.Background()
	env, ns := logsEnv(t)
	ac := &infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenants"}, Spec: infrav1.AzureClusterSpec{
		ResourceGroup: "victim-rg", SubscriptionID: "00000000-0000-4000-8000-0000000000ff", Location: "westeurope"}}
	ac.Spec.NetworkSpec.Vnet.Name = "victim-vnet"
	ac.Spec.NetworkSpec.Vnet.ResourceGroup = "victim-net-rg"
	if err := env.Client.Create(ctx, ac); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig, pub := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "id.pub")
	if err := os.WriteFile(kubeconfig, kubeconfigIn(t, env, ns), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"machine", "create", "byo-win-1", "--kubeconfig", kubeconfig, "--ssh-public-key", pub},
		{"machine", "delete", "byo-win-1", "--kubeconfig", kubeconfig},
	} {
		_, _, err := winkube(ctx, args...)
		if err == nil {
			t.Fatalf("winkube %s: succeeded, want a refusal", strings.Join(args, " "))
		}
		for _, want := range []string{"no identityRef", "--use-my-azure-login", "subscription 00000000-0000-4000-8000-0000000000ff", "resource group victim-rg", "VNet victim-vnet (resource group victim-net-rg)"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("winkube %s: %v\nwant it to say %q", strings.Join(args, " "), err, want)
			}
		}
	}
	o := &accessOptions{}
	if _, err := clusterServices(ctx, env.Client, ac, "", nil, o.useMyAzureLogin); err == nil || !strings.Contains(err.Error(), "--use-my-azure-login") {
		t.Errorf("Run Command's Azure for a cluster without identityRef: %v, want a refusal", err)
	}
	for _, cmd := range [][]string{{"machine", "create", "--help"}, {"logs", "--help"}} {
		out, _, err := winkube(ctx, cmd...)
		if err != nil || !strings.Contains(out, "--use-my-azure-login") {
			t.Errorf("winkube %s does not explain --use-my-azure-login (%v):\n%s", strings.Join(cmd, " "), err, out)
		}
	}
}

// TestManagedIdentityNeedsUseMyAzureLogin: a UserAssignedMSI identity is
// proven by the managed identity of the host the command runs on, so a
// tenant who writes one naming any client ID would choose which principal
// the user's host acts as: machine create and logs --via run-command
// refuse it without --use-my-azure-login, before any token is asked for.
func TestManagedIdentityNeedsUseMyAzureLogin(t *testing.T) {
	ctx := context.Background()
	env, ns := logsEnv(t)
	id := &infrav1.AzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "msi"}, Spec: infrav1.AzureClusterIdentitySpec{
		Type: infrav1.UserAssignedMSI, ClientID: "00000000-0000-4000-8000-00000000abcd", AllowedNamespaces: &infrav1.AllowedNamespaces{}}}
	ac := &infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenants"}, Spec: infrav1.AzureClusterSpec{
		ResourceGroup: "victim-rg", SubscriptionID: "00000000-0000-4000-8000-0000000000ff", Location: "westeurope", IdentityRef: &infrav1.IdentityReference{Name: "msi"}}}
	for _, obj := range []client.Object{id, ac} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	_, err := clusterServices(ctx, env.Client, ac, "", nil, false)
	if err == nil || !strings.Contains(err.Error(), "--use-my-azure-login") || !strings.Contains(err.Error(), "managed") {
		t.Errorf("a UserAssignedMSI identity without --use-my-azure-login: %v, want a refusal naming the flag", err)
	}
	// With it the identity is honoured: what fails next is the missing
	// token endpoint of a host that is not in Azure, not the refusal.
	if _, err := clusterServices(ctx, env.Client, ac, "", nil, true); err != nil && strings.Contains(err.Error(), "--use-my-azure-login") {
		t.Errorf("with --use-my-azure-login the identity is still refused: %v", err)
	}
}
