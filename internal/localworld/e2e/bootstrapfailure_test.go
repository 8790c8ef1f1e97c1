//go:build e2e

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/cli"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/rehearsal"
)

// rehearsalTimeout is the kubeadm timeouts of the rehearsed bootstraps, and
// rehearsalDeadline the world's bootstrap deadline: the log is read once
// kubeadm has given up.
const (
	rehearsalTimeout  = 20 * time.Second
	rehearsalDeadline = 45 * time.Second
)

// rehearsedFailures are, for each class, what the provider's condition
// must say of a Windows worker broken that way (its cause and the end of
// its cloudbase-init log, read through Run Command), and what doctor's fix
// must say; "" for the classes a Windows worker survives, as on Azure
// (cloudbase-init writes an undecodable file raw, and nothing reads
// azure.json while a worker joins).
var rehearsedFailures = map[rehearsal.Class]struct{ cause, fix string }{
	rehearsal.PreKubeadmCommand:   {"prepare-node.ps1", "preKubeadmCommands"},
	rehearsal.MalformedFile:       {},
	rehearsal.MissingAzureJSON:    {},
	rehearsal.ExpiredToken:        {"JWS signature", "token expired"},
	rehearsal.WrongCAHash:         {"none of the public keys", "caCertHashes"},
	rehearsal.UnreachableEndpoint: {"192.0.2.10:6443", "cannot reach the API server"},
	rehearsal.UnknownKubeletFlag:  {"the kubelet exited: failed to parse kubelet flag: unknown flag: --azure-container-registry-config", "kubeletExtraArgs"},
	rehearsal.WrongCRISocket:      {"the kubelet exited: failed to run Kubelet: validate service connection: validate CRI v1 runtime API", "criSocket"},
}

// checkRehearsedFailures is issue 35's rehearsal: one Windows worker
// broken in each class, as 'winkube rehearse bootstrap-failure all' does;
// the provider reports each that never becomes a node with the cause and
// its log's end, read through Azure's Run Command; 'winkube logs' collects
// such a machine's logs through Run Command; 'winkube doctor' explains
// each with its fix; the rehearsal is removed.
func checkRehearsedFailures(ctx context.Context, t *testing.T, w *localworld.World, o localworld.Options, start time.Time) {
	t.Helper()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("%6.1fs %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	// After the move off 2019, the cluster's Windows pool is the 2022 one.
	out, err := runWinkube(ctx, "rehearse", "bootstrap-failure", "all", "--state-dir", o.StateDir, "--machine-deployment", "ha-md-win-ws2022",
		"--kubeadm-timeout", rehearsalTimeout.String())
	if err != nil {
		t.Fatalf("winkube rehearse: %v\n%s", err, out)
	}
	logf("winkube rehearse bootstrap-failure all:\n%s", out)

	type outcome struct {
		machine string
		am      *infrav1.AzureMachine
	}
	got := map[rehearsal.Class]outcome{}
	poll.Until(t, 4*time.Minute, func() string {
		for class, want := range rehearsedFailures {
			ms := &clusterv1.MachineList{}
			if err := w.Client.List(ctx, ms, client.MatchingLabels{cli.RehearsalLabel: string(class)}); err != nil {
				return err.Error()
			}
			if len(ms.Items) != 1 {
				return fmt.Sprintf("%s: %d machines", class, len(ms.Items))
			}
			m := ms.Items[0]
			am := &infrav1.AzureMachine{}
			if err := w.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}, am); err != nil {
				return fmt.Sprintf("%s: %v", class, err)
			}
			c := conditions.Get(am, controllers.BootstrapSucceededCondition)
			switch {
			case want.cause == "" && (c == nil || c.Status != metav1.ConditionTrue):
				return fmt.Sprintf("%s: BootstrapSucceeded %+v, want True (a Windows worker joins)", class, c)
			case want.cause != "" && (c == nil || c.Reason != controllers.BootstrapFailedReason || !strings.Contains(c.Message, want.cause)):
				// A log read while kubeadm still retried names no error
				// yet: the provider reads it again.
				return fmt.Sprintf("%s: BootstrapSucceeded %+v, want BootstrapFailed naming %q", class, c, want.cause)
			}
			got[class] = outcome{machine: m.Name, am: am}
		}
		return ""
	})
	logf("every rehearsed class reported")
	for class, want := range rehearsedFailures {
		if want.cause == "" {
			continue
		}
		c := conditions.Get(got[class].am, controllers.BootstrapSucceededCondition)
		if !strings.Contains(c.Message, "read through Run Command") {
			t.Errorf("%s: the condition says\n%s\nwant the log's end, read through Run Command", class, c.Message)
		}
	}
	t.Logf("unreachable-endpoint's condition:\n%s", conditions.Get(got[rehearsal.UnreachableEndpoint].am, controllers.BootstrapSucceededCondition).Message)

	// Doctor explains each failure with the fix for its cause.
	out, _ = runWinkube(ctx, "doctor", "--state-dir", o.StateDir, "-o", "json")
	var report doctor.Report
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("doctor's JSON: %v\n%s", err, out)
	}
	for class, want := range rehearsedFailures {
		if want.cause == "" {
			continue
		}
		found := false
		for _, f := range report.Findings {
			if f.Check == "machines" && strings.HasSuffix(f.Object, "/"+got[class].am.Name) {
				found = f.Severity == doctor.Error && strings.Contains(f.Message, want.cause) && strings.Contains(f.Fix, want.fix)
				if !found {
					t.Errorf("%s: doctor says %+v; want an error naming %q with a fix about %q", class, f, want.cause, want.fix)
				}
			}
		}
		if !found {
			t.Errorf("%s: doctor does not report machine %s", class, got[class].am.Name)
		}
	}

	// winkube logs collects a machine that never joined through Run
	// Command: SSH cannot reach a node that has none.
	dir := filepath.Join(t.TempDir(), "logs")
	unreachable := got[rehearsal.UnreachableEndpoint].machine
	out, err = runWinkube(ctx, "logs", "--state-dir", o.StateDir, unreachable, "--write-to", dir)
	if err != nil {
		t.Errorf("winkube logs %s: %v\n%s", unreachable, err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cloudbase-init.log")); err != nil || !strings.Contains(string(b), "192.0.2.10:6443") {
		t.Errorf("the collected cloudbase-init.log (%v) does not show the failed discovery:\n%s\nwinkube logs said:\n%s", err, b, out)
	}
	logf("winkube logs collected %s through Run Command; doctor explains every failure", unreachable)

	// Cluster API mirrors the AzureMachine's Ready (False, BootstrapFailed)
	// into the Machine's InfrastructureReady, which a MachineHealthCheck's
	// unhealthyMachineConditions acts on: the failed machine is replaced.
	failedMachine := got[rehearsal.WrongCAHash].machine
	m := &clusterv1.Machine{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: failedMachine}, m); err != nil {
		t.Fatal(err)
	}
	if c := conditions.Get(m, clusterv1.MachineInfrastructureReadyCondition); c == nil || c.Reason != controllers.BootstrapFailedReason || !strings.Contains(c.Message, "none of the public keys") {
		t.Errorf("the Machine's InfrastructureReady: %+v, want the provider's BootstrapFailed and its cause", c)
	}
	mhc := &clusterv1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rehearsal-replace"}, Spec: clusterv1.MachineHealthCheckSpec{
		ClusterName: o.Name, Selector: metav1.LabelSelector{MatchLabels: map[string]string{cli.RehearsalLabel: string(rehearsal.WrongCAHash)}},
		Checks: clusterv1.MachineHealthCheckChecks{UnhealthyMachineConditions: []clusterv1.UnhealthyMachineCondition{
			{Type: clusterv1.MachineInfrastructureReadyCondition, Status: metav1.ConditionFalse, TimeoutSeconds: ptr.To[int32](10)}}}}}
	if err := w.Client.Create(ctx, mhc); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		switch err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: failedMachine}, &clusterv1.Machine{}); {
		case apierrors.IsNotFound(err):
			return ""
		case err != nil:
			return err.Error()
		}
		return "the machine whose bootstrap failed is not replaced yet"
	})
	logf("a MachineHealthCheck on InfrastructureReady replaced the machine whose bootstrap failed")
	if err := w.Client.Delete(ctx, mhc); err != nil {
		t.Fatal(err)
	}

	if out, err := runWinkube(ctx, "rehearse", "bootstrap-failure", "--delete", "--state-dir", o.StateDir); err != nil {
		t.Fatalf("winkube rehearse --delete: %v\n%s", err, out)
	}
	poll.Until(t, 3*time.Minute, func() string {
		ms := &clusterv1.MachineList{}
		if err := w.Client.List(ctx, ms, client.HasLabels{cli.RehearsalLabel}); err != nil {
			return err.Error()
		}
		if len(ms.Items) > 0 {
			return fmt.Sprintf("%d rehearsal machines left", len(ms.Items))
		}
		return ""
	})
	logf("the rehearsal is removed")
}
