package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
)

// The command against a real API server playing a local world's management
// and workload clusters: the windows flavor's cluster at v1.35.4, its
// machines all rolled out, planned to v1.36.3 with the emulator's catalog.
func TestPlanUpgradeOnALocalWorld(t *testing.T) {
	env, ns, state := fakeWorldState(t)
	ctx := context.Background()
	run := commandRunner(ctx, "plan", "upgrade", "-n", ns)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", state}, "--to is required"},
		{[]string{"--to", "1.36.3", "--state-dir", state}, "vMAJOR.MINOR.PATCH"},
		{[]string{"--to", "v1.36.3", "--state-dir", state, "--apply", "-o", "json"}, "--apply prints its progress as text"},
		{[]string{"--to", "v1.36.3", "--state-dir", state, "-o", "json", "--write-to", "-"}, "would mix with -o json"},
	} {
		if _, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
	objs, err := flavors.Generate(flavors.Windows, flavors.Options{ClusterName: "winkube", Namespace: ns, KubernetesVersion: "v1.35.4",
		WindowsVersion: infrav1.WindowsServer2022, LinuxNodes: 1, WindowsNodes: 2, Location: "westeurope",
		SubscriptionID: "00000000-0000-0000-0000-000000000001", SSHPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh test"})
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "winkube-kubeconfig"}, Data: map[string][]byte{"value": env.Environment.KubeConfig}})
	for _, o := range objs {
		switch x := o.(type) {
		case *clusterv1.Cluster, *infrav1.AzureCluster, *infrav1.AzureMachineTemplate, *bootstrapv1.KubeadmConfigTemplate, *corev1.Secret:
		case *controlplanev1.KubeadmControlPlane:
			defer func() {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(x), x); err != nil {
					t.Fatal(err)
				}
				x.Status.Versions = []clusterv1.StatusVersion{{Version: "v1.35.4", Replicas: 1}}
				if err := env.Client.Status().Update(ctx, x); err != nil {
					t.Fatal(err)
				}
			}()
		case *clusterv1.MachineDeployment:
		default:
			continue
		}
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("%T %s: %v", o, o.GetName(), err)
		}
	}
	dir := filepath.Join(t.TempDir(), "upgrade")
	out, err := run("--to", "v1.36.3", "--state-dir", state, "--write-to", dir)
	var status ExitStatus
	if !errors.As(err, &status) || status != 1 {
		t.Fatalf("error %v, want exit status 1 (warnings)\n%s", err, out)
	}
	for _, want := range []string{"Upgrading cluster " + ns + "/winkube from v1.35.4 to v1.36.3",
		"1     KubeadmControlPlane  winkube-control-plane", "3     MachineDeployment    winkube-md-win", "WARNING addon-images", "0 error(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	written, err := os.ReadFile(filepath.Join(dir, "1-kubeadmcontrolplane-winkube-control-plane.yaml"))
	if err != nil || !strings.Contains(string(written), "version: v1.36.3") {
		t.Errorf("the control plane's change: %v\n%s", err, written)
	}
	t.Log("\n$ winkube plan upgrade --to v1.36.3 --local winkube --write-to upgrade/\n" + out)

	out, err = run("--to", "v1.37.0", "--state-dir", state, "-o", "json")
	if !errors.As(err, &status) || status != 2 {
		t.Fatalf("two minors: error %v, want exit status 2\n%s", err, out)
	}
	var plan struct {
		ExitCode int `json:"exitCode"`
		Findings []struct{ Check, Severity, Fix string }
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil || plan.ExitCode != 2 || len(plan.Findings) == 0 || plan.Findings[0].Severity != "error" || plan.Findings[0].Fix == "" {
		t.Errorf("JSON plan %+v (%v):\n%s", plan, err, out)
	}
	out, err = run("--to", "v1.37.0", "--state-dir", state, "-o", "yaml")
	if !errors.As(err, &status) || status != 2 || !strings.Contains(out, "exitCode: 2") || !strings.Contains(out, "severity: error") {
		t.Errorf("YAML plan (%v):\n%s", err, out)
	}
}
