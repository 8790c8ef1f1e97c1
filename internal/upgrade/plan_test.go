package upgrade_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/upgrade"
)

// fixture is a mixed cluster made by the windows flavor in its own
// namespace of the management cluster: a control plane, a Linux and a
// Windows MachineDeployment.
type fixture struct {
	t   *testing.T
	ns  string
	c   client.Client
	kcp *controlplanev1.KubeadmControlPlane
}

const (
	linuxMD   = "up-md-0"
	windowsMD = "up-md-win"
	windowsMP = "up-mp-win"
)

func newFixture(t *testing.T, version string, win infrav1.WindowsServerVersion) *fixture {
	t.Helper()
	return newFlavorFixture(t, flavors.Windows, version, win)
}

// newPoolFixture is the machinepool-windows flavor's cluster: its Windows
// nodes are a MachinePool's (windowsMP).
func newPoolFixture(t *testing.T, version string, win infrav1.WindowsServerVersion) *fixture {
	t.Helper()
	return newFlavorFixture(t, flavors.MachinePoolWindows, version, win)
}

func newFlavorFixture(t *testing.T, flavor, version string, win infrav1.WindowsServerVersion) *fixture {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "upgrade-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	objs, err := flavors.Generate(flavor, flavors.Options{ClusterName: "up", Namespace: ns.Name, KubernetesVersion: version,
		WindowsVersion: win, LinuxNodes: 1, WindowsNodes: 1, Location: "westeurope",
		SubscriptionID: "00000000-0000-0000-0000-000000000001", SSHPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh test"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ns: ns.Name, c: env.Client}
	for _, o := range objs {
		switch x := o.(type) {
		case *controlplanev1.KubeadmControlPlane:
			f.kcp = x
		case *clusterv1.Cluster, *infrav1.AzureCluster, *infrav1.AzureMachineTemplate, *clusterv1.MachineDeployment, *bootstrapv1.KubeadmConfigTemplate,
			*clusterv1.MachinePool, *infrav1.AzureMachinePool, *bootstrapv1.KubeadmConfig:
		default:
			continue
		}
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	// Every machine runs the version, as Cluster API reports it.
	f.setStatus(f.kcp, version)
	f.setStatus(&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: linuxMD}}, version)
	if flavor == flavors.MachinePoolWindows {
		f.setStatus(&clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: windowsMP}}, version)
	} else {
		f.setStatus(&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: windowsMD}}, version)
	}
	return f
}

// setStatus reports obj's replicas as all up to date and Ready at version,
// as Cluster API does once a rollout ends.
func (f *fixture) setStatus(obj client.Object, version string) {
	f.t.Helper()
	if err := f.trySetStatus(obj, version); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) trySetStatus(obj client.Object, version string) error {
	ctx := context.Background()
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	switch x := obj.(type) {
	case *controlplanev1.KubeadmControlPlane:
		n := *x.Spec.Replicas
		x.Status.ObservedGeneration, x.Status.Replicas, x.Status.ReadyReplicas, x.Status.UpToDateReplicas = x.Generation, &n, &n, &n
		x.Status.Versions = []clusterv1.StatusVersion{{Version: version, Replicas: n}}
	case *clusterv1.MachineDeployment:
		n := *x.Spec.Replicas
		x.Status.ObservedGeneration, x.Status.Replicas, x.Status.ReadyReplicas, x.Status.UpToDateReplicas = x.Generation, &n, &n, &n
		x.Status.Versions = []clusterv1.StatusVersion{{Version: version, Replicas: n}}
	case *clusterv1.MachinePool:
		n := *x.Spec.Replicas
		x.Status.ObservedGeneration, x.Status.Replicas, x.Status.ReadyReplicas, x.Status.UpToDateReplicas = x.Generation, &n, &n, &n
		x.Status.Versions = []clusterv1.StatusVersion{{Version: version, Replicas: n}}
	}
	return f.c.Status().Update(ctx, obj)
}

// node adds a workload node of a MachineDeployment, its Machine pointing
// at it.
func (f *fixture) node(md, name, build, kubelet string) {
	f.t.Helper()
	ctx := context.Background()
	name = f.ns + "-" + name
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "linux"}}}
	if build != "" {
		n.Labels[corev1.LabelOSStable] = "windows"
		n.Labels["node.kubernetes.io/windows-build"] = build
	}
	if err := f.c.Create(ctx, n); err != nil {
		f.t.Fatal(err)
	}
	n.Status.NodeInfo.KubeletVersion = kubelet
	if err := f.c.Status().Update(ctx, n); err != nil {
		f.t.Fatal(err)
	}
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name,
		Labels: map[string]string{clusterv1.ClusterNameLabel: "up", clusterv1.MachineDeploymentNameLabel: md}},
		Spec: clusterv1.MachineSpec{ClusterName: "up", Version: kubelet, Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("data")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachine", Name: name}}}
	if err := f.c.Create(ctx, m); err != nil {
		f.t.Fatal(err)
	}
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: name}
	if err := f.c.Status().Update(ctx, m); err != nil {
		f.t.Fatal(err)
	}
}

// windowsRelease moves the Windows pool to a template of another release
// (a pool made when the cluster's version still had its images).
func (f *fixture) windowsRelease(win infrav1.WindowsServerVersion) {
	f.t.Helper()
	ctx := context.Background()
	amt := &infrav1.AzureMachineTemplate{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMD}, amt); err != nil {
		f.t.Fatal(err)
	}
	n := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: windowsMD + "-" + string(win), Labels: amt.Labels}, Spec: amt.Spec}
	n.Spec.Template.Spec.WindowsServerVersion = win
	if err := f.c.Create(ctx, n); err != nil {
		f.t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMD}, md); err != nil {
		f.t.Fatal(err)
	}
	md.Spec.Template.Spec.InfrastructureRef.Name = n.Name
	if err := f.c.Update(ctx, md); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) options(target string) upgrade.Options {
	return upgrade.Options{Management: f.c, Workload: f.c, Namespace: f.ns, ClusterName: "up", Target: target, Images: catalog}
}

func (f *fixture) plan(target string) *upgrade.Plan {
	f.t.Helper()
	p, err := upgrade.Build(context.Background(), f.options(target))
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func findings(p *upgrade.Plan, check string, sev doctor.Severity) []upgrade.Finding {
	var out []upgrade.Finding
	for _, f := range p.Findings {
		if f.Check == check && f.Severity == sev {
			out = append(out, f)
		}
	}
	return out
}

// TestPlanUpgradesInOrder: a healthy mixed cluster at v1.35.4 moves to
// v1.36.3 in three steps (control plane, Linux pool, Windows pool), with
// no error: the reference images of v1.36.3 exist for Linux and Windows
// Server 2022, and so do its kube-proxy and cloud-provider images.
func TestPlanUpgradesInOrder(t *testing.T) {
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	f.node(linuxMD, "linux-a", "", "v1.35.4")
	f.node(windowsMD, "win-a", "10.0.20348", "v1.35.4")
	p := f.plan("v1.36.3")
	var got []string
	for _, s := range p.Steps {
		got = append(got, s.Kind+"/"+s.Name+"/"+s.OS)
	}
	want := []string{"KubeadmControlPlane/up-control-plane/linux", "MachineDeployment/" + linuxMD + "/linux", "MachineDeployment/" + windowsMD + "/windows"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("steps %v, want %v", got, want)
	}
	for _, f := range p.Findings {
		if f.Severity == doctor.Error {
			t.Errorf("error in a healthy cluster's plan: %+v", f)
		}
	}
	// Calico v3.30 is tested up to 1.33: said, not refused.
	if len(findings(p, upgrade.CheckAddons, doctor.Warning)) == 0 {
		t.Error("no warning that Calico v3.30 is not tested with 1.36")
	}
	if p.From != "v1.35.4" || !strings.Contains(p.Steps[0].Manifest, "version: v1.36.3") {
		t.Errorf("from %s, control plane change:\n%s", p.From, p.Steps[0].Manifest)
	}
	var out bytes.Buffer
	if err := p.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n$ winkube plan upgrade --to v1.36.3 --local up\n" + out.String())
}

// TestPlanChecksFail: each check, given the cluster that fails it.
func TestPlanChecksFail(t *testing.T) {
	cases := []struct {
		name, from, to string
		setup          func(*fixture)
		check          string
		sev            doctor.Severity
		says           string
	}{
		{name: "two minors at once", from: "v1.35.4", to: "v1.37.0", check: upgrade.CheckSkew, sev: doctor.Error, says: "one minor at a time"},
		{name: "downgrade", from: "v1.35.4", to: "v1.34.4", check: upgrade.CheckSkew, sev: doctor.Error, says: "does not downgrade"},
		{name: "a kubelet four minors behind", from: "v1.35.4", to: "v1.36.3", setup: func(f *fixture) { f.node(linuxMD, "old", "", "v1.32.13") },
			check: upgrade.CheckSkew, sev: doctor.Error, says: "at most 3 minors older"},
		{name: "no reference image of the target", from: "v1.35.4", to: "v1.36.99", check: upgrade.CheckReferenceImage, sev: doctor.Error, says: "no Windows Server 2022 reference image of v1.36.99"},
		{name: "no cloud-provider release for the target", from: "v1.36.3", to: "v1.37.0", check: upgrade.CheckAddons, sev: doctor.Error, says: "cloud-provider-azure has no release for Kubernetes 1.37"},
		{name: "Calico not tested with the target", from: "v1.35.4", to: "v1.36.3", check: upgrade.CheckAddons, sev: doctor.Warning, says: "Calico v3.30.7 is tested up to Kubernetes 1.33"},
		{name: "the Windows release of the nodes would change", from: "v1.35.4", to: "v1.36.3", setup: func(f *fixture) { f.node(windowsMD, "w2019", "10.0.17763", "v1.35.4") },
			check: upgrade.CheckWindowsRelease, sev: doctor.Error, says: "runs Windows Server 2019 (10.0.17763) but the pool's template boots Windows Server 2022"},
		{name: "Windows Server 2019 past its support", from: "v1.35.4", to: "v1.36.3", setup: func(f *fixture) { f.windowsRelease(infrav1.WindowsServer2019) },
			check: upgrade.CheckWindowsRelease, sev: doctor.Error, says: "Windows Server 2019 is not supported for Kubernetes v1.33"},
		{name: "a budget that allows no disruption", from: "v1.35.4", to: "v1.36.3", setup: func(f *fixture) {
			pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "iis"},
				Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "iis"}}}}
			if err := f.c.Create(context.Background(), pdb); err != nil {
				f.t.Fatal(err)
			}
			pdb.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
			if err := f.c.Status().Update(context.Background(), pdb); err != nil {
				f.t.Fatal(err)
			}
		}, check: upgrade.CheckPDBs, sev: doctor.Warning, says: "allows no disruption"},
		{name: "a Windows pool without a drain timeout", from: "v1.35.4", to: "v1.36.3", setup: func(f *fixture) {
			md := &clusterv1.MachineDeployment{}
			if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: windowsMD}, md); err != nil {
				f.t.Fatal(err)
			}
			md.Spec.Template.Spec.Deletion.NodeDrainTimeoutSeconds = nil
			if err := f.c.Update(context.Background(), md); err != nil {
				f.t.Fatal(err)
			}
		}, check: upgrade.CheckDrain, sev: doctor.Warning, says: "no nodeDrainTimeoutSeconds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.from, infrav1.WindowsServer2022)
			if tc.setup != nil {
				tc.setup(f)
			}
			p := f.plan(tc.to)
			found := false
			for _, fd := range findings(p, tc.check, tc.sev) {
				found = found || strings.Contains(fd.Message, tc.says)
				if fd.Fix == "" {
					t.Errorf("finding without a fix: %+v", fd)
				}
			}
			if !found {
				t.Errorf("no %s %s finding saying %q in %+v", tc.sev, tc.check, tc.says, p.Findings)
			}
			if want := map[doctor.Severity]int{doctor.Error: 2, doctor.Warning: 1}[tc.sev]; p.ExitCode() < want {
				t.Errorf("exit code %d, want at least %d", p.ExitCode(), want)
			}
		})
	}
}
