package controllers_test

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azurejson"
	"github.com/winkube/winkube/internal/poll"
)

const testTenant = "6f7a1e2b-5c3d-4e8f-9a0b-1c2d3e4f5a6b"

// TestAzureJSONSecrets: each AzureMachineTemplate, AzureMachinePool and
// AzureMachine not made from a template gets the <name>-azure-json Secret
// its nodes' bootstrap configs read, owned by it and labelled with the
// cluster, with cloud-provider-azure's fields from the AzureCluster.
func TestAzureJSONSecrets(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	f := newCluster(t, "cloudcfg")
	labels := map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}
	tmpl := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "cloudcfg-md-win", Namespace: f.ns, Labels: labels},
		Spec: infrav1.AzureMachineTemplateSpec{Template: infrav1.AzureMachineTemplateResource{Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}}}}}
	pool := &infrav1.AzureMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "cloudcfg-mp-win", Namespace: f.ns, Labels: labels},
		Spec: infrav1.AzureMachinePoolSpec{Template: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}}}
	cloned := &infrav1.AzureMachine{ObjectMeta: metav1.ObjectMeta{Name: "cloudcfg-md-win-abcde", Namespace: f.ns, Labels: labels,
		Annotations: map[string]string{"cluster.x-k8s.io/cloned-from-name": tmpl.Name}},
		Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}}}
	for _, o := range []client.Object{tmpl, pool, cloned} {
		if err := env.Client.Create(f.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, owner := range []client.Object{tmpl, pool} {
		sec := &corev1.Secret{}
		env.Until(t, time.Minute, func(r client.Reader) string {
			if err := r.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: owner.GetName() + "-azure-json"}, sec); err != nil {
				return err.Error()
			}
			return ""
		})
		if sec.Labels[clusterv1.ClusterNameLabel] != f.cluster.Name || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != owner.GetUID() {
			t.Errorf("%s: labels %v owners %v", sec.Name, sec.Labels, sec.OwnerReferences)
		}
		for _, key := range []string{azurejson.ControlPlaneKey, azurejson.WorkerNodeKey} {
			var cfg azurejson.Config
			if err := json.Unmarshal(sec.Data[key], &cfg); err != nil {
				t.Fatalf("%s %s: %v", sec.Name, key, err)
			}
			if cfg.Cloud != "AzurePublicCloud" || cfg.TenantID != testTenant || cfg.SubscriptionID != f.ac.Spec.SubscriptionID || cfg.ResourceGroup != f.ns ||
				cfg.Location != "westeurope" || cfg.VnetName == "" || cfg.VnetResourceGroup != f.ns || cfg.SubnetName == "" || cfg.SecurityGroupName == "" ||
				cfg.SecurityGroupResourceGroup != f.ns || cfg.RouteTableName != "cloudcfg-node-routetable" || cfg.LoadBalancerSku != "Standard" ||
				cfg.MaximumLoadBalancerRuleCount != 250 || cfg.LoadBalancerBackendPoolConfigurationType != "nodeIP" || !cfg.UseInstanceMetadata || !cfg.UseManagedIdentityExtension || cfg.VMType != "vmss" {
				t.Errorf("%s %s: %+v", sec.Name, key, cfg)
			}
		}
	}
	// A machine made from a template uses its template's Secret.
	err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: cloned.Name + "-azure-json"}, &corev1.Secret{})
	if err == nil {
		t.Error("an AzureMachine made from a template got a Secret of its own")
	}
	// Leave the shared emulator as it was found: the deletion tests count
	// everything its subscription holds.
	for _, o := range []client.Object{cloned, pool, f.ac} {
		if err := env.Client.Delete(f.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, cloned, pool, f.ac)
}

// A paused Cluster's azure.json Secrets are not written (Cluster API's
// pause contract: clusterctl move pauses the Cluster while it copies it,
// and the source's manager must leave its objects alone); unpausing writes
// them. A template of an unpaused cluster, created after the paused one's,
// shows the reconciler has had its turn.
func TestAzureJSONSecretWaitsWhileTheClusterIsPaused(t *testing.T) {
	parallel(t)
	_, cfg := newEmulator(t, arm.Options{})
	stop := startControllers(t, cfg)
	defer stop()
	paused, live := newCluster(t, "jsonpaused"), newCluster(t, "jsonlive")
	setClusterPaused(t, paused.cluster, true)
	template := func(f *fixture) *infrav1.AzureMachineTemplate {
		tmpl := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: f.cluster.Name + "-md-0", Namespace: f.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}},
			Spec: infrav1.AzureMachineTemplateSpec{Template: infrav1.AzureMachineTemplateResource{Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}}}}}
		if err := env.Client.Create(f.ctx, tmpl); err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	secretOf := func(f *fixture, tmpl *infrav1.AzureMachineTemplate) string {
		err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: tmpl.Name + "-azure-json"}, &corev1.Secret{})
		if err != nil {
			return err.Error()
		}
		return ""
	}
	held := template(paused)
	written := template(live)
	poll.Until(t, time.Minute, func() string { return secretOf(live, written) })
	if secretOf(paused, held) == "" {
		t.Fatalf("the azure.json Secret of %s was written while its Cluster is paused", held.Name)
	}
	setClusterPaused(t, paused.cluster, false)
	poll.Until(t, time.Minute, func() string { return secretOf(paused, held) })
}
