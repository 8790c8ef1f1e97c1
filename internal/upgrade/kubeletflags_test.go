package upgrade_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/upgrade"
)

// rollOut runs the upgrade to v1.36.3 and plays Cluster API: each object
// the upgrade has moved to the target is reported rolled out, until Run
// returns, which must be without an error.
func (f *fixture) rollOut() {
	f.t.Helper()
	ctx := context.Background()
	progress := &syncBuffer{}
	done := f.run(ctx, progress)
	var err error
	poll.Until(f.t, 2*time.Minute, func() string {
		select {
		case err = <-done:
			return ""
		default:
		}
		kcp := &controlplanev1.KubeadmControlPlane{}
		if f.c.Get(ctx, client.ObjectKeyFromObject(f.kcp), kcp) == nil && kcp.Spec.Version == "v1.36.3" {
			_ = f.trySetStatus(kcp, "v1.36.3")
		}
		mds := &clusterv1.MachineDeploymentList{}
		if f.c.List(ctx, mds, client.InNamespace(f.ns)) == nil {
			for i := range mds.Items {
				if mds.Items[i].Spec.Template.Spec.Version == "v1.36.3" {
					_ = f.trySetStatus(&mds.Items[i], "v1.36.3")
				}
			}
		}
		mps := &clusterv1.MachinePoolList{}
		if f.c.List(ctx, mps, client.InNamespace(f.ns)) == nil {
			for i := range mps.Items {
				if mps.Items[i].Spec.Template.Spec.Version == "v1.36.3" {
					_ = f.trySetStatus(&mps.Items[i], "v1.36.3")
				}
			}
		}
		return "the upgrade is still running:\n" + progress.String()
	})
	if err != nil {
		f.t.Fatalf("the upgrade failed: %v\n%s", err, progress)
	}
}

const removedFlag = "pod-infra-container-image"

func withRemovedFlag(args []bootstrapv1.Arg) []bootstrapv1.Arg {
	return append(args, bootstrapv1.Arg{Name: removedFlag, Value: ptr.To("mcr.microsoft.com/oss/kubernetes/pause:3.10.1")})
}

// otherArgs are a registration's kubelet args but the removed flag.
func otherArgs(args []bootstrapv1.Arg) []string {
	var out []string
	for _, a := range args {
		if a.Name != removedFlag {
			out = append(out, a.Name+"="+ptr.Deref(a.Value, ""))
		}
	}
	return out
}

func passesRemovedFlag(args []bootstrapv1.Arg) bool {
	return slices.ContainsFunc(args, func(a bootstrapv1.Arg) bool { return a.Name == removedFlag })
}

// TestUpgradeDropsRemovedKubeletFlagsFromTheControlPlane: a control plane
// whose kubeadmConfigSpec passes --pod-infra-container-image (gone from
// the kubelet in 1.35) in its init and join registrations: the plan's
// error is fixed by its own first step, which drops the flag with the
// version in one change of the KubeadmControlPlane, so --apply goes ahead
// and the other kubelet args stay. Before, the plan told the user to edit
// the KubeadmControlPlane and --apply refused to start.
func TestUpgradeDropsRemovedKubeletFlagsFromTheControlPlane(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(f.kcp), kcp); err != nil {
		t.Fatal(err)
	}
	spec := &kcp.Spec.KubeadmConfigSpec
	spec.InitConfiguration.NodeRegistration.KubeletExtraArgs = withRemovedFlag(spec.InitConfiguration.NodeRegistration.KubeletExtraArgs)
	spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = withRemovedFlag(spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs)
	if err := f.c.Update(ctx, kcp); err != nil {
		t.Fatal(err)
	}
	initArgs, joinArgs := otherArgs(spec.InitConfiguration.NodeRegistration.KubeletExtraArgs), otherArgs(spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs)
	if len(initArgs) == 0 {
		t.Fatal("the flavor's control plane passes no other kubelet arg at init: the test would not see them kept")
	}

	p := f.plan("v1.36.3")
	errs := findings(p, upgrade.CheckKubeletFlags, doctor.Error)
	if len(errs) != 1 || errs[0].Object != "KubeadmControlPlane/"+f.ns+"/"+kcp.Name || !strings.Contains(errs[0].Fix, "the plan's step for "+kcp.Name+" does both in one change") {
		t.Fatalf("kubelet-flags errors %+v, want one on the control plane fixed by the plan's step", errs)
	}
	first := p.Steps[0]
	if first.Kind != "KubeadmControlPlane" || strings.Contains(first.Manifest, removedFlag) ||
		!strings.Contains(first.Manifest, "  version: v1.36.3\n  kubeadmConfigSpec:\n") || strings.Count(first.Manifest, "kubeletExtraArgs:") != 2 {
		t.Fatalf("the control plane's step does not drop the flag with the version:\n%s", first.Manifest)
	}
	t.Log("\n" + first.Manifest)

	f.rollOut()
	kcp = &controlplanev1.KubeadmControlPlane{}
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(f.kcp), kcp); err != nil {
		t.Fatal(err)
	}
	spec = &kcp.Spec.KubeadmConfigSpec
	if kcp.Spec.Version != "v1.36.3" || passesRemovedFlag(spec.InitConfiguration.NodeRegistration.KubeletExtraArgs) || passesRemovedFlag(spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs) {
		t.Errorf("the control plane is at %s with init args %v and join args %v, want v1.36.3 without --%s", kcp.Spec.Version,
			spec.InitConfiguration.NodeRegistration.KubeletExtraArgs, spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs, removedFlag)
	}
	if i, j := otherArgs(spec.InitConfiguration.NodeRegistration.KubeletExtraArgs), otherArgs(spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs); !slices.Equal(i, initArgs) || !slices.Equal(j, joinArgs) {
		t.Errorf("the control plane's other kubelet args are init %v, join %v; want init %v, join %v", i, j, initArgs, joinArgs)
	}
}

// TestUpgradeDropsRemovedKubeletFlagsFromAMachinePool: a Windows
// MachinePool whose KubeadmConfig passes --pod-infra-container-image: the
// plan's step writes a new KubeadmConfig without it (and without the
// bootstrap token the old one carries), and --apply points the MachinePool
// at it with the version. Before, the plan told the user to edit the
// KubeadmConfig (which would change no machine: its bootstrap data is made
// once) and --apply refused to start.
func TestUpgradeDropsRemovedKubeletFlagsFromAMachinePool(t *testing.T) {
	ctx := context.Background()
	f := newPoolFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	old := &bootstrapv1.KubeadmConfig{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMP}, old); err != nil {
		t.Fatal(err)
	}
	reg := &old.Spec.JoinConfiguration.NodeRegistration
	reg.KubeletExtraArgs = withRemovedFlag(reg.KubeletExtraArgs)
	// What the kubeadm bootstrap provider writes into a pool's config.
	const token = "abcdef.0123456789abcdef"
	old.Spec.JoinConfiguration.Discovery.BootstrapToken.Token = token
	if err := f.c.Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	joinArgs := otherArgs(reg.KubeletExtraArgs)
	want := windowsMP + "-v1-36-3"

	p := f.plan("v1.36.3")
	errs := findings(p, upgrade.CheckKubeletFlags, doctor.Error)
	if len(errs) != 1 || errs[0].Object != "MachinePool/"+f.ns+"/"+windowsMP || !strings.Contains(errs[0].Fix, "a new KubeadmConfig "+want+" without --"+removedFlag) {
		t.Fatalf("kubelet-flags errors %+v, want one on %s naming the new KubeadmConfig %s", errs, windowsMP, want)
	}
	last := p.Steps[len(p.Steps)-1]
	if last.Kind != "MachinePool" || last.NewBootstrapTemplate != want || !strings.Contains(last.Manifest, "kind: KubeadmConfig\n") ||
		strings.Contains(last.Manifest, removedFlag) || strings.Contains(last.Manifest, token) || !strings.Contains(last.Manifest, "configRef:\n          name: "+want) {
		t.Fatalf("the MachinePool's step does not write %s without the flag and the token:\n%+v\n%s", want, last, last.Manifest)
	}
	t.Log("\n" + last.Manifest)

	f.rollOut()
	mp := &clusterv1.MachinePool{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMP}, mp); err != nil {
		t.Fatal(err)
	}
	if ref := mp.Spec.Template.Spec.Bootstrap.ConfigRef.Name; ref != want || mp.Spec.Template.Spec.Version != "v1.36.3" {
		t.Errorf("the MachinePool is at %s with bootstrap config %s, want v1.36.3 with %s", mp.Spec.Template.Spec.Version, ref, want)
	}
	kc := &bootstrapv1.KubeadmConfig{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: want}, kc); err != nil {
		t.Fatal(err)
	}
	args := kc.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs
	if passesRemovedFlag(args) || !slices.Equal(otherArgs(args), joinArgs) || len(joinArgs) == 0 {
		t.Errorf("the new KubeadmConfig passes %v, want the old one's other args %v", args, joinArgs)
	}
	if tok := kc.Spec.JoinConfiguration.Discovery.BootstrapToken.Token; tok != "" {
		t.Errorf("the new KubeadmConfig carries the old one's bootstrap token %q", tok)
	}
}
