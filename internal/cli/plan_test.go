package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/localworld"
)

// The command against a real API server playing a local world's management
// and workload clusters, with the world's registry and its seeds' images:
// a Windows Server 2019 pool running the seeds' iis-1809 and iis:latest.
func TestPlanWindowsUpgradeOnALocalWorld(t *testing.T) {
	env, ns, state := fakeWorldState(t)
	ctx := context.Background()
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Close() }()
	if err := reg.PushAll(ctx, registry.Catalog("v1.32.3", nil)); err != nil {
		t.Fatal(err)
	}
	kubeconfig := env.Environment.KubeConfig
	run := commandRunner(ctx, "plan", "windows-upgrade", "-n", ns)
	// Bad input names the flag.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", state}, "--to is required"},
		{[]string{"--to", "2019", "--state-dir", state}, "the release clusters are leaving"},
		{[]string{"--to", "ltsc2022", "--state-dir", state}, `--to "ltsc2022": use 2022 or 2025`},
		{[]string{"--to", "2022", "--state-dir", state, "-o", "json", "--write-to", "-"}, "would mix with -o json"},
		{[]string{"--to", "2022", "--state-dir", state}, "has not said where its image registry is"},
	} {
		if _, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
	if err := os.WriteFile(filepath.Join(state, localworld.RegistryFile), []byte(reg.Host()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{clusterv1.ClusterNameLabel: "winkube"}
	sel := map[string]string{clusterv1.ClusterNameLabel: "winkube", clusterv1.MachineDeploymentNameLabel: "winkube-md-win"}
	amt := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "winkube-md-win", Labels: labels}}
	amt.Spec.Template.Spec.AzureVMSpec = infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}, WindowsServerVersion: infrav1.WindowsServer2019}
	kct := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
		"metadata": map[string]any{"namespace": ns, "name": "winkube-md-win"}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"files": []any{map[string]any{"path": "c:/k/azure.json", "contentFrom": map[string]any{"secret": map[string]any{"name": "winkube-md-win-azure-json", "key": "worker-node-azure.json"}}}}}}}}}
	iis := func(name, image string) *appsv1.Deployment {
		l := map[string]string{"app": name}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{NodeSelector: map[string]string{corev1.LabelOSStable: "windows"},
				Containers: []corev1.Container{{Name: "iis", Image: image}}}}}}
	}
	objs := []client.Object{
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "winkube"}, Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 6443}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "winkube-kubeconfig"}, Data: map[string][]byte{"value": kubeconfig}},
		amt, kct,
		&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "winkube-md-win", Labels: labels},
			Spec: clusterv1.MachineDeploymentSpec{ClusterName: "winkube", Replicas: ptr.To[int32](2), Selector: metav1.LabelSelector{MatchLabels: sel},
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: sel}, Spec: clusterv1.MachineSpec{ClusterName: "winkube", Version: "v1.32.3",
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfigTemplate", Name: "winkube-md-win"}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachineTemplate", Name: "winkube-md-win"}}}}},
		iis("iis-1809", "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"),
		iis("iis", "mcr.microsoft.com/windows/servercore/iis:latest"),
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iis-1809"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "iis-1809"}}}},
	}
	for _, n := range []string{"winkube-md-w-7xk2p", "winkube-md-w-q9d4s"} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelOSStable: "windows", "node.kubernetes.io/windows-build": "10.0.17763"}}})
	}
	createAndRemove(t, env, objs...)
	// The PDB's pod runs on a 2019 node and may not be disrupted.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iis-1809-5d8f7c-abcde", Labels: map[string]string{"app": "iis-1809"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "iis-1809-5d8f7c", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "winkube-md-w-7xk2p", NodeSelector: map[string]string{corev1.LabelOSStable: "windows"},
			Containers: []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"}}}}
	createAndRemove(t, env, p)
	pdb := &policyv1.PodDisruptionBudget{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "iis-1809"}, pdb); err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if err := env.Client.Status().Update(ctx, pdb); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "pools")
	out, err := run("--to", "2022", "--state-dir", state, "--write-to", dir)
	var status ExitStatus
	if !errors.As(err, &status) || status != 2 {
		t.Fatalf("error %v, want exit status 2\n%s", err, out)
	}
	for _, want := range []string{
		"Replacing 2 node(s) of 10.0.17763 (Windows Server 2019)",
		"Deployment/" + ns + "/iis-1809",
		"mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022",
		"Deployment/" + ns + "/iis ", "10.0.17763,10.0.20348,10.0.26100  yes",
		"PodDisruptionBudget/" + ns + "/iis-1809",
		"NEW POOL MachineDeployment winkube-md-win-ws2022 (2 replicas, Windows Server 2022) replaces winkube-md-win (Windows Server 2019)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	written, err := os.ReadFile(filepath.Join(dir, "winkube-md-win-ws2022.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: AzureMachineTemplate", `windowsServerVersion: "2022"`, "kind: KubeadmConfigTemplate", "kind: MachineDeployment", "name: winkube-md-win-ws2022"} {
		if !strings.Contains(string(written), want) {
			t.Errorf("written pool lacks %q:\n%s", want, written)
		}
	}
	t.Log("\n$ winkube plan windows-upgrade --to 2022 --local winkube --write-to pools/\n" + out)

	// JSON says the same, with the exit code.
	out, _ = run("--to", "2022", "--state-dir", state, "-o", "json")
	if !strings.Contains(out, `"use": "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022"`) || !strings.Contains(out, `"exitCode": 2`) {
		t.Errorf("json:\n%s", out)
	}
	out, _ = run("--to", "2022", "--state-dir", state, "-o", "yaml")
	if !strings.Contains(out, "runsOnTarget: false") || !strings.Contains(out, "exitCode: 2") {
		t.Errorf("yaml:\n%s", out)
	}
}
