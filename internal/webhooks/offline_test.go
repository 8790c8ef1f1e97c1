package webhooks_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/webhooks"
)

// Admit runs a set of objects through the webhooks before any API server
// has them: each object's own checks, and the checks across the set that
// the webhooks make by reading the API server.
func TestAdmitChecksASetAsTheAPIServerWould(t *testing.T) {
	ctx := context.Background()
	labels := map[string]string{clusterv1.ClusterNameLabel: "demo"}
	azureCluster := func() *infrav1.AzureCluster {
		return &infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default", Labels: labels},
			Spec: infrav1.AzureClusterSpec{Location: "westeurope", SubscriptionID: "00000000-0000-0000-0000-000000000001"}}
	}
	cluster := func(pods string) *clusterv1.Cluster {
		return &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"}, Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureCluster", Name: "demo"},
			ClusterNetwork:    clusterv1.ClusterNetwork{Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{pods}}}}}
	}
	windowsMachine := func(name string) *infrav1.AzureMachine {
		return &infrav1.AzureMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
			Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}}}
	}

	if err := webhooks.Admit(ctx, scheme.New(), []client.Object{azureCluster(), cluster("192.168.0.0/16")}); err != nil {
		t.Fatalf("a valid set was refused: %v", err)
	}
	in := azureCluster()
	if err := webhooks.Admit(ctx, scheme.New(), []client.Object{in}); err != nil || in.Spec.ResourceGroup != "" {
		t.Fatalf("Admit must not change what it is given (resource group %q): %v", in.Spec.ResourceGroup, err)
	}

	cases := map[string]struct {
		objs []client.Object
		want []string
	}{
		// The Cluster webhook reads the AzureCluster (here: from the set)
		// and finds the default VNet 10.0.0.0/8 under the pod range.
		"pod range on the VNet": {[]client.Object{azureCluster(), cluster("10.1.0.0/16")}, []string{"Cluster demo", "pod"}},
		// Two Windows machines whose 15-character computer names are the
		// same: the AzureMachine webhook lists the cluster's machines.
		"computer names collide": {[]client.Object{windowsMachine("demo-md-win-aaaaa-12345"), windowsMachine("demo-md-win-bbbbb-12345")}, []string{"demo-md-win-bbbbb-12345"}},
		"a name Kubernetes refuses": {[]client.Object{cluster("192.168.0.0/16"), &infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Name: "Demo_1", Namespace: "default"}}},
			[]string{"metadata.name", "Demo_1"}},
		"portal location": {[]client.Object{func() client.Object { c := azureCluster(); c.Spec.Location = "West Europe"; return c }()},
			[]string{"spec.location", "westeurope"}},
	}
	for name, c := range cases {
		err := webhooks.Admit(ctx, scheme.New(), c.objs)
		var set *webhooks.SetError
		if !errors.As(err, &set) {
			t.Errorf("%s: %v, want the set refused", name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v does not name %q", name, err, w)
			}
		}
	}
}
