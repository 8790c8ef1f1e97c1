package upgrade_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/upgrade"
)

// syncBuffer is the progress a test reads while Run writes it.
type syncBuffer = testenv.SyncBuffer

func (f *fixture) kcpVersion() (string, int64) {
	k := &controlplanev1.KubeadmControlPlane{}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(f.kcp), k); err != nil {
		f.t.Fatal(err)
	}
	return k.Spec.Version, k.Generation
}

func (f *fixture) mdVersion(name string) string {
	md := &clusterv1.MachineDeployment{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, md); err != nil {
		f.t.Fatal(err)
	}
	return md.Spec.Template.Spec.Version
}

func (f *fixture) run(ctx context.Context, progress *syncBuffer) chan error {
	o := f.options("v1.36.3")
	o.Progress, o.PollInterval = progress, 20*time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := upgrade.Run(ctx, o)
		done <- err
	}()
	return done
}

// TestApplyRollsInOrderAndResumes: the control plane first, the Linux pool
// once the control plane is Ready on the target, the Windows pool once the
// Linux one is; interrupted while it waits for the control plane, a second
// run does not change it again but waits and goes on.
func TestApplyRollsInOrderAndResumes(t *testing.T) {
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	progress := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := f.run(ctx, progress)
	poll.Until(t, 30*time.Second, func() string {
		if v, _ := f.kcpVersion(); v != "v1.36.3" {
			return "the control plane is at " + v
		}
		return ""
	})
	if v := f.mdVersion(linuxMD); v != "v1.35.4" {
		t.Fatalf("the Linux pool moved to %s before the control plane rolled out", v)
	}
	cancel()
	err := <-done
	var se *upgrade.StepError
	if !errors.As(err, &se) || se.Number != 1 || !strings.Contains(err.Error(), "run the upgrade to v1.36.3 again: it continues from this step") {
		t.Fatalf("interrupted run: %v", err)
	}
	_, gen := f.kcpVersion()

	progress = &syncBuffer{}
	done = f.run(context.Background(), progress)
	poll.Until(t, 30*time.Second, func() string {
		if !strings.Contains(progress.String(), "spec.version is v1.36.3 already") {
			return "the second run has not found the control plane's change: " + progress.String()
		}
		return ""
	})
	if v := f.mdVersion(linuxMD); v != "v1.35.4" {
		t.Fatalf("the Linux pool moved to %s before the control plane rolled out", v)
	}
	f.setStatus(f.kcp, "v1.36.3")
	poll.Until(t, 30*time.Second, func() string {
		if v := f.mdVersion(linuxMD); v != "v1.36.3" {
			return "the Linux pool is at " + v
		}
		return ""
	})
	if v := f.mdVersion(windowsMD); v != "v1.35.4" {
		t.Fatalf("the Windows pool moved to %s before the Linux pool rolled out", v)
	}
	f.setStatus(&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: linuxMD}}, "v1.36.3")
	poll.Until(t, 30*time.Second, func() string {
		if v := f.mdVersion(windowsMD); v != "v1.36.3" {
			return "the Windows pool is at " + v
		}
		return ""
	})
	f.setStatus(&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: windowsMD}}, "v1.36.3")
	if err := <-done; err != nil {
		t.Fatalf("second run: %v\n%s", err, progress)
	}
	if _, g := f.kcpVersion(); g != gen {
		t.Errorf("the second run changed the control plane again (generation %d -> %d)", gen, g)
	}
	out := progress.String()
	for _, line := range []string{"[1/3] KubeadmControlPlane up-control-plane (linux): v1.35.4 -> v1.36.3", "[2/3] MachineDeployment up-md-0 (linux)",
		"[3/3] MachineDeployment up-md-win (windows)", "[3/3] MachineDeployment up-md-win: every machine runs v1.36.3 and is Ready", "runs v1.36.3"} {
		if !strings.Contains(out, line) {
			t.Errorf("progress lacks %q:\n%s", line, out)
		}
	}
	t.Log("\n" + out)
}

// TestApplyStopsAtTheFirstFailure: a control plane that does not roll out
// in time stops the upgrade there, saying what it waited for and how to
// go on; the pools are not touched.
func TestApplyStopsAtTheFirstFailure(t *testing.T) {
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	o := f.options("v1.36.3")
	// The step's timeout is Run's option: a quarter of a second is a dozen
	// looks at a control plane that never rolls out.
	o.PollInterval, o.StepTimeout = 20*time.Millisecond, 250*time.Millisecond
	_, err := upgrade.Run(context.Background(), o)
	var se *upgrade.StepError
	if !errors.As(err, &se) || se.Step.Kind != "KubeadmControlPlane" {
		t.Fatalf("got %v, want the control plane's step to fail", err)
	}
	for _, want := range []string{"step 1/3, KubeadmControlPlane up-control-plane to v1.36.3", "not rolled out after 250ms", "run the upgrade to v1.36.3 again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if v := f.mdVersion(linuxMD); v != "v1.35.4" {
		t.Errorf("the Linux pool moved to %s after the control plane failed", v)
	}
}

// TestApplyRefusesAPlanWithErrors: nothing changes when the plan has an
// error (two minors at once).
func TestApplyRefusesAPlanWithErrors(t *testing.T) {
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	err := upgrade.Apply(context.Background(), f.c, client.ObjectKey{Namespace: f.ns, Name: "up"}, "v1.37.0", nil)
	if !errors.Is(err, upgrade.ErrPlanHasErrors) || !strings.Contains(err.Error(), "one minor at a time") {
		t.Fatalf("got %v, want the plan's errors", err)
	}
	if v, _ := f.kcpVersion(); v != "v1.35.4" {
		t.Errorf("the control plane moved to %s", v)
	}
}

// windowsKubeletArg adds a kubelet arg to the Windows pool's
// KubeadmConfigTemplate and returns the template's name.
func (f *fixture) windowsKubeletArg(name, value string) string {
	f.t.Helper()
	ctx := context.Background()
	md := &clusterv1.MachineDeployment{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMD}, md); err != nil {
		f.t.Fatal(err)
	}
	kct := &bootstrapv1.KubeadmConfigTemplate{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: md.Spec.Template.Spec.Bootstrap.ConfigRef.Name}, kct); err != nil {
		f.t.Fatal(err)
	}
	reg := &kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration
	reg.KubeletExtraArgs = append(reg.KubeletExtraArgs, bootstrapv1.Arg{Name: name, Value: ptr.To(value)})
	if err := f.c.Update(ctx, kct); err != nil {
		f.t.Fatal(err)
	}
	return kct.Name
}

// TestUpgradeDropsRemovedKubeletFlags: a Windows pool whose bootstrap
// template passes --pod-infra-container-image (gone from the kubelet in
// 1.35) is an error of the plan, whose fix is its own step: a new
// KubeadmConfigTemplate without the flag, which --apply writes beside the
// new machine template and points the MachineDeployment at; the pool's
// other kubelet args stay.
func TestUpgradeDropsRemovedKubeletFlags(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	old := f.windowsKubeletArg("pod-infra-container-image", "mcr.microsoft.com/oss/kubernetes/pause:3.10.1")
	want := old + "-v1-36-3"
	p := f.plan("v1.36.3")
	errs := findings(p, upgrade.CheckKubeletFlags, doctor.Error)
	if len(errs) != 1 || errs[0].Object != "MachineDeployment/"+f.ns+"/"+windowsMD ||
		!strings.Contains(errs[0].Message, "--pod-infra-container-image (removed in v1.35.0)") || !strings.Contains(errs[0].Fix, want) {
		t.Fatalf("kubelet-flags errors %+v, want one on %s naming the flag and the new template %s", errs, windowsMD, want)
	}
	if p.ExitCode() != 2 {
		t.Errorf("exit code %d, want 2", p.ExitCode())
	}
	last := p.Steps[len(p.Steps)-1]
	if last.Name != windowsMD || last.NewBootstrapTemplate != want || !strings.Contains(last.Manifest, "kind: KubeadmConfigTemplate") ||
		strings.Contains(last.Manifest, "pod-infra-container-image") || !strings.Contains(last.Manifest, "configRef:\n          name: "+want) {
		t.Fatalf("the Windows pool's step does not write %s without the flag:\n%+v\n%s", want, last, last.Manifest)
	}

	progress := &syncBuffer{}
	done := f.run(ctx, progress)
	f.upgradeControlPlaneThenLinux(t, progress)
	f.setStatus(&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: linuxMD}}, "v1.36.3")
	md := &clusterv1.MachineDeployment{}
	poll.Until(t, 30*time.Second, func() string {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMD}, md); err != nil {
			return err.Error()
		}
		if ref := md.Spec.Template.Spec.Bootstrap.ConfigRef.Name; ref != want || md.Spec.Template.Spec.Version != "v1.36.3" {
			return "the Windows pool is at " + md.Spec.Template.Spec.Version + " with bootstrap template " + ref
		}
		return ""
	})
	f.setStatus(&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: windowsMD}}, "v1.36.3")
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, progress)
	}
	oldKCT, newKCT := &bootstrapv1.KubeadmConfigTemplate{}, &bootstrapv1.KubeadmConfigTemplate{}
	for name, kct := range map[string]*bootstrapv1.KubeadmConfigTemplate{old: oldKCT, want: newKCT} {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, kct); err != nil {
			t.Fatal(err)
		}
	}
	args := func(k *bootstrapv1.KubeadmConfigTemplate) []string {
		var out []string
		for _, a := range k.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs {
			if a.Name != "pod-infra-container-image" {
				out = append(out, a.Name+"="+ptr.Deref(a.Value, ""))
			}
		}
		return out
	}
	for _, a := range newKCT.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs {
		if a.Name == "pod-infra-container-image" {
			t.Errorf("the new KubeadmConfigTemplate %s still passes --%s", want, a.Name)
		}
	}
	if o, n := args(oldKCT), args(newKCT); strings.Join(o, " ") != strings.Join(n, " ") || len(n) == 0 {
		t.Errorf("the new template's other kubelet args %v, want the old one's %v", n, o)
	}
}

// TestWaitingNamesWhatHoldsAMachine: a rollout that stops says why: the
// progress names the pool's machine that is not Ready with its Ready
// condition's message, and the old machine held in deletion with its
// Deleting condition's message (the pods that hold its drain). Before,
// both states printed the same counts ("1 of 1 machines up to date, 1
// Ready"), so a hung upgrade did not say which machine it waited for.
func TestWaitingNamesWhatHoldsAMachine(t *testing.T) {
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	ctx := context.Background()
	machine := func(name string, conds ...metav1.Condition) *clusterv1.Machine {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Finalizers: []string{"upgrade.test/hold"},
			Labels: map[string]string{clusterv1.ClusterNameLabel: "up", clusterv1.MachineDeploymentNameLabel: linuxMD}},
			Spec: clusterv1.MachineSpec{ClusterName: "up", Version: "v1.35.4", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("data")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachine", Name: name}}}
		if err := f.c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		for i := range conds {
			conds[i].LastTransitionTime = metav1.Now()
		}
		m.Status.Conditions = conds
		if err := f.c.Status().Update(ctx, m); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = f.c.Get(ctx, client.ObjectKeyFromObject(m), m)
			m.Finalizers = nil
			_ = f.c.Update(ctx, m)
		})
		return m
	}
	old := machine("up-md-0-old",
		metav1.Condition{Type: clusterv1.MachineReadyCondition, Status: metav1.ConditionFalse, Reason: "NotReady", Message: "* Deleting: Machine deletion in progress, stage: DrainingNode"},
		metav1.Condition{Type: clusterv1.MachineDeletingCondition, Status: metav1.ConditionTrue, Reason: clusterv1.MachineDeletingDrainingNodeReason,
			Message: "Drain not completed yet (started at 2026-11-28T15:20:48Z):\n* Pod kube-system/coredns-7d764666f9-qzpdm: deletionTimestamp set, but still not removed from the Node"})
	if err := f.c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	machine("up-md-0-new", metav1.Condition{Type: clusterv1.MachineReadyCondition, Status: metav1.ConditionFalse, Reason: "NotReady",
		Message: "* NodeHealthy: Waiting for a Node with spec.providerID azure:///x to exist"})
	machine("up-md-0-ready", metav1.Condition{Type: clusterv1.MachineReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"})

	progress := &syncBuffer{}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := f.run(cctx, progress)
	f.upgradeControlPlaneThenLinux(t, progress)
	// What Cluster API reports while the old machine drains: the new
	// one counts, the old one is still there.
	md := &clusterv1.MachineDeployment{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: linuxMD}, md); err != nil {
		t.Fatal(err)
	}
	one := *md.Spec.Replicas
	md.Status.ObservedGeneration, md.Status.ReadyReplicas, md.Status.UpToDateReplicas = md.Generation, &one, &one
	md.Status.Versions = []clusterv1.StatusVersion{{Version: "v1.35.4", Replicas: 1}, {Version: "v1.36.3", Replicas: one}}
	if err := f.c.Status().Update(ctx, md); err != nil {
		t.Fatal(err)
	}
	wants := []string{
		"up-md-0-old (deleting: Drain not completed yet (started at 2026-11-28T15:20:48Z): * Pod kube-system/coredns-7d764666f9-qzpdm: deletionTimestamp set, but still not removed from the Node)",
		"up-md-0-new (* NodeHealthy: Waiting for a Node with spec.providerID azure:///x to exist)",
	}
	poll.Until(t, 30*time.Second, func() string {
		out := progress.String()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				return "the progress does not say " + w + ":\n" + out
			}
		}
		return ""
	})
	if out := progress.String(); strings.Contains(out, "up-md-0-ready") {
		t.Errorf("the progress names a Ready machine that holds nothing:\n%s", out)
	}
	cancel()
	<-done
}

// upgradeControlPlaneThenLinux waits for the run to move the control plane
// to v1.36.3, reports it upgraded as Cluster API would, and waits for the
// run to move the Linux pool next.
func (f *fixture) upgradeControlPlaneThenLinux(t *testing.T, progress *syncBuffer) {
	t.Helper()
	poll.Until(t, 30*time.Second, func() string {
		if v, _ := f.kcpVersion(); v != "v1.36.3" {
			return "the control plane is at " + v + ": " + progress.String()
		}
		return ""
	})
	f.setStatus(f.kcp, "v1.36.3")
	poll.Until(t, 30*time.Second, func() string {
		if v := f.mdVersion(linuxMD); v != "v1.36.3" {
			return "the Linux pool is at " + v
		}
		return ""
	})
}
