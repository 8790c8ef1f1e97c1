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
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// The command end to end against a real API server that plays both the
// management cluster of a local world (its state directory, Cluster and
// <cluster>-kubeconfig Secret) and the workload cluster the Secret names.
func TestDoctorCommandOnALocalWorld(t *testing.T) {
	t.Parallel()
	env, ns, state := fakeWorldState(t)
	ctx := context.Background()
	kubeconfig := env.Environment.KubeConfig
	run := commandRunner(ctx, "doctor", "-n", ns)
	if _, err := run("--state-dir", state); err == nil || !strings.Contains(err.Error(), "no Cluster in namespace "+ns) {
		t.Fatalf("error %v, want one saying there is no Cluster", err)
	}
	if err := env.Client.Create(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 6443}}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-kubeconfig"},
		Data: map[string][]byte{"value": kubeconfig}}); err != nil {
		t.Fatal(err)
	}
	out, err := run("--state-dir", state, "--cert-warning", "1h")
	if err != nil || !strings.Contains(out, "no problems found") {
		t.Fatalf("healthy: %v\n%s", err, out)
	}

	// A Windows node without kube-proxy or CNI: errors, exit status 2.
	createAndRemove(t, env, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-1", Labels: map[string]string{corev1.LabelOSStable: "windows"}}})
	out, err = run("--state-dir", state, "--cert-warning", "1h", "-o", "json")
	var status ExitStatus
	if !errors.As(err, &status) || status != 2 {
		t.Fatalf("error %v, want exit status 2\n%s", err, out)
	}
	var report struct {
		ExitCode int
		Findings []struct{ Check, Severity, Message, Fix string }
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if report.ExitCode != 2 || len(report.Findings) == 0 || report.Findings[0].Severity != "error" || report.Findings[0].Fix == "" {
		t.Fatalf("report %+v", report)
	}
	// The workload kubeconfig given directly works the same.
	wk := filepath.Join(t.TempDir(), "workload.kubeconfig")
	if err := os.WriteFile(wk, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = run("--kubeconfig", wk, "--cert-warning", "1h")
	if !errors.As(err, &status) || status != 2 || !strings.Contains(out, "ERROR   windows-networking-pods  Node/win-1") || !strings.Contains(out, "fix: ") {
		t.Fatalf("error %v, output:\n%s", err, out)
	}
}
