package cli

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/rehearsal"
)

// The rehearsal adds, beside the cluster's Windows MachineDeployment, one
// of one machine per class whose bootstrap template is a copy broken that
// way, selecting only its own machines; --delete takes them away.
func TestRehearseBootstrapFailure(t *testing.T) {
	env, ns, state := fakeWorldState(t)
	ctx := context.Background()
	run := commandRunner(ctx, "rehearse", "bootstrap-failure", "-n", ns)
	labels := map[string]string{clusterv1.ClusterNameLabel: "demo"}
	objs := []client.Object{
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}, Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 6443}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-kubeconfig"}, Data: map[string][]byte{"value": env.Environment.KubeConfig}},
	}
	for _, p := range []struct {
		name string
		os   infrav1.OSType
	}{{"demo-md-win", infrav1.Windows}, {"demo-md-linux", infrav1.Linux}} {
		sel := map[string]string{clusterv1.ClusterNameLabel: "demo", clusterv1.MachineDeploymentNameLabel: p.name}
		amt := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: labels}}
		amt.Spec.Template.Spec.AzureVMSpec = infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", OSDisk: infrav1.OSDisk{OSType: p.os}}
		kct := &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name}}
		kct.Spec.Template.Spec.Files = []bootstrapv1.File{{Path: "c:/k/azure.json", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: p.name + "-azure-json", Key: "worker-node-azure.json"}}}}
		objs = append(objs, amt, kct, &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: labels},
			Spec: clusterv1.MachineDeploymentSpec{ClusterName: "demo", Replicas: ptr.To[int32](3), Selector: metav1.LabelSelector{MatchLabels: sel},
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: sel}, Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.36.3",
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: p.name}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachineTemplate", Name: p.name}}}}})
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", state}, "name a class"},
		{[]string{"no-such-class", "--state-dir", state}, `"no-such-class" is not a class`},
		{[]string{"--delete", "wrong-ca-hash", "--state-dir", state}, "name no class"},
		{[]string{"wrong-ca-hash"}, "give the management cluster"},
		{[]string{"wrong-ca-hash", "--state-dir", state, "--machine-deployment", "nope"}, "--machine-deployment nope: no MachineDeployment"},
	} {
		_, err := run(c.args...)
		var usage *UsageError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &usage) {
			t.Errorf("%v: error %v, want bad input saying %q", c.args, err, c.want)
		}
	}

	out, err := run("wrong-ca-hash", "expired-token", "--state-dir", state, "--kubeadm-timeout", "30s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "demo-md-win-rh-wrong-ca-hash") || !strings.Contains(out, "winkube doctor") {
		t.Errorf("the rehearsal printed:\n%s", out)
	}
	md := &clusterv1.MachineDeployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-md-win-rh-wrong-ca-hash"}, md); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{clusterv1.ClusterNameLabel: "demo", RehearsalLabel: string(rehearsal.WrongCAHash)}
	if ptr.Deref(md.Spec.Replicas, 0) != 1 || !maps.Equal(md.Spec.Selector.MatchLabels, want) || !maps.Equal(md.Spec.Template.Labels, want) ||
		md.Spec.Template.Spec.Bootstrap.ConfigRef.Name != md.Name || md.Spec.Template.Spec.InfrastructureRef.Name != "demo-md-win" {
		t.Errorf("the rehearsal's MachineDeployment: %+v", md.Spec)
	}
	kct := &bootstrapv1.KubeadmConfigTemplate{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: md.Name}, kct); err != nil {
		t.Fatal(err)
	}
	j := kct.Spec.Template.Spec.JoinConfiguration
	if h := j.Discovery.BootstrapToken.CACertHashes; len(h) != 1 || ptr.Deref(j.Timeouts.DiscoverySeconds, 0) != 30 {
		t.Errorf("the broken template's join configuration: %+v", j)
	}
	// The expired token was made in the workload cluster, expired.
	tok := &bootstrapv1.KubeadmConfigTemplate{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-md-win-rh-expired-token"}, tok); err != nil {
		t.Fatal(err)
	}
	id, _, _ := strings.Cut(tok.Spec.Template.Spec.JoinConfiguration.Discovery.BootstrapToken.Token, ".")
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + id}, secret); err != nil {
		t.Errorf("the expired token's Secret: %v", err)
	}
	// The source is untouched.
	src := &bootstrapv1.KubeadmConfigTemplate{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-md-win"}, src); err != nil || len(src.Spec.Template.Spec.JoinConfiguration.Discovery.BootstrapToken.CACertHashes) != 0 {
		t.Errorf("the source template changed: %+v (%v)", src.Spec.Template.Spec.JoinConfiguration, err)
	}
	if _, err := run("wrong-ca-hash", "--state-dir", state); err == nil || !strings.Contains(err.Error(), "already rehearsed") {
		t.Errorf("rehearsing a class twice: %v", err)
	}

	if out, err := run("--delete", "--state-dir", state); err != nil || !strings.Contains(out, "deleted MachineDeployment "+ns+"/demo-md-win-rh-wrong-ca-hash") {
		t.Fatalf("--delete: %v\n%s", err, out)
	}
	left := &clusterv1.MachineDeploymentList{}
	if err := env.Client.List(ctx, left, client.InNamespace(ns), client.HasLabels{RehearsalLabel}); err != nil || len(left.Items) != 0 {
		t.Errorf("rehearsals left after --delete: %d (%v)", len(left.Items), err)
	}
}
