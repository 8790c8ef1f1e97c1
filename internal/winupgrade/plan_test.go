package winupgrade

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// The local world's registry with the seeds' images (real manifest lists:
// iis:windowsservercore-ltsc2019 offers 10.0.17763 only, iis:latest the
// three builds), as winkube up publishes them.
var reg *registry.Registry

func TestMain(m *testing.M) {
	var err error
	if reg, err = registry.Start("127.0.0.1:0"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := reg.PushAll(context.Background(), registry.Catalog("v1.36.3", nil)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = reg.Close()
	os.Exit(code)
}

const (
	iis2019  = "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"
	iisMulti = "mcr.microsoft.com/windows/servercore/iis:latest"
	core2019 = "mcr.microsoft.com/windows/servercore:ltsc2019"
	core2022 = "mcr.microsoft.com/windows/servercore:ltsc2022"
	nginx    = "docker.io/library/nginx:1.27"
	csiProxy = "ghcr.io/kubernetes-sigs/sig-windows/csi-proxy:v1.1.3"
)

func resolver() *workload.Resolver {
	r := workload.NewResolver()
	r.Mirror = reg.Host()
	return r
}

func node(name, os, build string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: os, corev1.LabelHostname: name}}}
	if build != "" {
		n.Labels[workload.WindowsBuildLabel] = build
		n.Labels["agentpool"] = "win2019"
	}
	return n
}

func podSpec(image string, os string) corev1.PodSpec {
	s := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}
	if os != "" {
		s.NodeSelector = map[string]string{corev1.LabelOSStable: os}
	}
	return s
}

func deployment(name string, spec corev1.PodSpec) *appsv1.Deployment {
	l := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: spec}}}
}

func pod(name, nodeName string, l map[string]string, spec corev1.PodSpec, owned bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, Labels: l}, Spec: spec}
	p.Spec.NodeName = nodeName
	if owned {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u", Controller: ptr.To(true)}}
	}
	return p
}

// workloadCluster is a cluster in the middle of leaving Windows Server 2019:
// two 2019 nodes, a Linux node, and workloads of every kind.
func workloadCluster() client.Client {
	hp := podSpec(csiProxy, "windows")
	hp.SecurityContext = &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}}
	pinned := podSpec(core2022, "windows")
	pinned.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: workload.WindowsBuildLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"10.0.17763"}}}}}}}}
	pool := podSpec(iisMulti, "windows")
	pool.NodeSelector["agentpool"] = "win2019"
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "report"},
		Spec: batchv1.CronJobSpec{Schedule: "@daily", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: podSpec(core2019, "windows")}}}}}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "iis-1809"},
		Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "iis-1809"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}}
	relaxed := pdb.DeepCopy()
	relaxed.Name, relaxed.Spec.Selector.MatchLabels["app"], relaxed.Status.DisruptionsAllowed = "iis-multi", "iis-multi", 1
	sticky := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "iis"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "iis-1809"}, SessionAffinity: corev1.ServiceAffinityClientIP}}
	objs := []client.Object{
		node("win-a", "windows", "10.0.17763"), node("win-b", "windows", "10.0.17763"), node("linux-a", "linux", ""),
		deployment("iis-1809", podSpec(iis2019, "windows")),
		deployment("iis-multi", podSpec(iisMulti, "windows")),
		deployment("web", podSpec(nginx, "")),
		deployment("on-old-pool", pool),
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "csi-proxy"},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}, Template: corev1.PodTemplateSpec{Spec: hp}}},
		cron,
		pod("iis-1809-x", "win-a", map[string]string{"app": "iis-1809"}, podSpec(iis2019, "windows"), true),
		pod("iis-multi-x", "win-b", map[string]string{"app": "iis-multi"}, podSpec(iisMulti, "windows"), true),
		pod("debug", "win-b", nil, podSpec(core2022, "windows"), false),
		pod("pinned", "", nil, pinned, false),
		pdb, relaxed, sticky,
	}
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithStatusSubresource(&policyv1.PodDisruptionBudget{}).Build()
}

func findings(p *Plan, check, object string) []Finding {
	var out []Finding
	for _, f := range p.Findings {
		if f.Check == check && f.Object == object {
			out = append(out, f)
		}
	}
	return out
}

func image(p *Plan, workload string) *Image {
	for i := range p.Images {
		if p.Images[i].Workload == workload {
			return &p.Images[i]
		}
	}
	return nil
}

func TestPlanNamesWhatBreaksOnWindowsServer2022(t *testing.T) {
	p, err := Run(context.Background(), Options{Workload: workloadCluster(), Target: infrav1.WindowsServer2022, Resolver: resolver()})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Leaving["10.0.17763"], ","); got != "win-a,win-b" {
		t.Errorf("leaving 10.0.17763: %q, want win-a,win-b", got)
	}
	// The seeds' iis-1809: 2019 only, with the ltsc2022 tag of its repository as the fix.
	im := image(p, "Deployment/apps/iis-1809")
	if im == nil || im.RunsOnTarget || strings.Join(im.Builds, ",") != "10.0.17763" || im.Use != "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022" {
		t.Errorf("iis-1809: %+v, want 10.0.17763 only, not on 2022, use ...:windowsservercore-ltsc2022", im)
	}
	if fs := findings(p, CheckImages, "Deployment/apps/iis-1809"); len(fs) != 1 || fs[0].Severity != doctor.Error || !strings.Contains(fs[0].Fix, "windowsservercore-ltsc2022") {
		t.Errorf("iis-1809 findings: %+v", fs)
	}
	// The multi-build image is safe; so is a HostProcess image.
	for _, w := range []string{"Deployment/apps/iis-multi", "DaemonSet/kube-system/csi-proxy"} {
		if im := image(p, w); im == nil || !im.RunsOnTarget || im.Use != "" {
			t.Errorf("%s: %+v, want it to run on 2022", w, im)
		}
		if fs := findings(p, CheckImages, w); len(fs) != 0 {
			t.Errorf("%s: findings %+v, want none", w, fs)
		}
	}
	if im := image(p, "Deployment/apps/iis-multi"); im != nil && strings.Join(im.Builds, ",") != "10.0.17763,10.0.20348,10.0.26100" {
		t.Errorf("iis:latest builds %v, want the three", im.Builds)
	}
	// A Linux workload is not in the plan; a CronJob's image is.
	if im := image(p, "Deployment/apps/web"); im != nil {
		t.Errorf("Linux nginx in the plan: %+v", im)
	}
	if im := image(p, "CronJob/apps/report"); im == nil || im.Use != core2022 {
		t.Errorf("CronJob: %+v, want servercore:ltsc2022 as the fix", im)
	}
	// Pins: a node name, a build affinity, a pool label only old nodes carry.
	for _, c := range []struct{ object, want string }{
		{"Pod/apps/debug", "spec.nodeName win-b"},
		{"Pod/apps/pinned", "allows only 10.0.17763"},
		{"Deployment/apps/on-old-pool", "agentpool=win2019"},
	} {
		fs := findings(p, CheckPins, c.object)
		if len(fs) != 1 || !strings.Contains(fs[0].Message, c.want) || fs[0].Severity != doctor.Error {
			t.Errorf("%s: pins %+v, want one error saying %q", c.object, fs, c.want)
		}
	}
	// The budget that allows no disruption blocks the drain; the other does not.
	if fs := findings(p, CheckPDBs, "PodDisruptionBudget/apps/iis-1809"); len(fs) != 1 || !strings.Contains(fs[0].Message, "iis-1809-x") {
		t.Errorf("blocking PDB: %+v", fs)
	}
	if fs := findings(p, CheckPDBs, "PodDisruptionBudget/apps/iis-multi"); len(fs) != 0 {
		t.Errorf("PDB allowing a disruption reported: %+v", fs)
	}
	if fs := findings(p, CheckServices, "Service/apps/iis"); len(fs) != 1 || fs[0].Severity != doctor.Warning {
		t.Errorf("ClientIP Service: %+v", fs)
	}
	if p.ExitCode() != 2 {
		t.Errorf("exit code %d, want 2", p.ExitCode())
	}
	var text strings.Builder
	if err := p.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Replacing 2 node(s) of 10.0.17763 (Windows Server 2019): win-a, win-b", "WORKLOAD", "ON 2022",
		"Deployment/apps/iis-1809", "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	t.Log("\n" + text.String())
}

func TestPlanTo2025PrefersItsOwnTagAndKeeps2022Images(t *testing.T) {
	p, err := Run(context.Background(), Options{Workload: workloadCluster(), Target: infrav1.WindowsServer2025, Resolver: resolver()})
	if err != nil {
		t.Fatal(err)
	}
	if im := image(p, "Deployment/apps/iis-1809"); im == nil || im.Use != "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2025" {
		t.Errorf("iis-1809 for 2025: %+v, want the ltsc2025 tag", im)
	}
	// A 2022 image runs on 2025 hosts.
	if im := image(p, "Pod/apps/debug"); im == nil || !im.RunsOnTarget {
		t.Errorf("servercore:ltsc2022 on 2025: %+v, want it to run", im)
	}
}

func TestPlanRefusesATargetPastItsSupport(t *testing.T) {
	v, _ := images.ParseVersion("v1.37.0")
	p, err := Run(context.Background(), Options{Workload: workloadCluster(), Target: infrav1.WindowsServer2022, Resolver: resolver(), Version: v})
	if err != nil {
		t.Fatal(err)
	}
	var got []Finding
	for _, f := range p.Findings {
		if f.Check == CheckSupport {
			got = append(got, f)
		}
	}
	// 2022 on 1.37 is an error, and the 2019 nodes are past their support.
	if len(got) != 2 || got[0].Severity != doctor.Error || !strings.Contains(got[0].Fix, "--to 2025") || !strings.Contains(got[1].Message, "Windows Server 2019 is not supported for Kubernetes v1.33") {
		t.Errorf("support findings: %+v", got)
	}
	if _, err := Run(context.Background(), Options{Workload: workloadCluster(), Target: "2030", Resolver: resolver()}); err == nil {
		t.Error("target 2030 accepted")
	}
}

func TestNewPoolNames(t *testing.T) {
	for _, c := range []struct{ old, want, prefix string }{
		{"demo-md-win", "demo-md-win-ws2022", "win-s2022"},
		{"win-2019", "win-2022", "win-2022"},
		{"pool", "pool-ws2022", "win-s2022"},
	} {
		got := newPoolName(c.old, infrav1.WindowsServer2019, infrav1.WindowsServer2022)
		if got != c.want {
			t.Errorf("newPoolName(%s) = %s, want %s", c.old, got, c.want)
		}
	}
	if got := newPoolName(strings.Repeat("a", 63), infrav1.WindowsServer2019, infrav1.WindowsServer2022); len(got) != 63 || !strings.HasSuffix(got, "-ws2022") {
		t.Errorf("long name %s (%d)", got, len(got))
	}
}

// management is a management cluster with the cluster's Windows 2019
// MachineDeployment and MachinePool, a Windows 2022 one and a Linux one.
func management(t *testing.T, extra ...client.Object) client.Client {
	t.Helper()
	labels := map[string]string{clusterv1.ClusterNameLabel: "demo"}
	amt := func(name string, os infrav1.OSType, win infrav1.WindowsServerVersion) *infrav1.AzureMachineTemplate {
		a := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels, UID: "uid-" + "amt",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: "demo", UID: "c"}}}}
		a.Spec.Template.Spec.VMSize = "Standard_D4s_v3"
		a.Spec.Template.Spec.OSDisk.OSType = os
		a.Spec.Template.Spec.WindowsServerVersion = win
		return a
	}
	kct := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": bootstrapGroupVersion, "kind": "KubeadmConfigTemplate",
			"metadata": map[string]any{"namespace": "default", "name": name},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"files": []any{map[string]any{
				"path": "c:/k/azure.json", "contentFrom": map[string]any{"secret": map[string]any{"name": name + "-azure-json", "key": "worker-node-azure.json"}}}}}}},
		}}
		return u
	}
	md := func(name string) *clusterv1.MachineDeployment {
		sel := map[string]string{clusterv1.ClusterNameLabel: "demo", clusterv1.MachineDeploymentNameLabel: name}
		return &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels,
			Annotations: map[string]string{"machinedeployment.clusters.x-k8s.io/revision": "3"}},
			Spec: clusterv1.MachineDeploymentSpec{ClusterName: "demo", Replicas: ptr.To[int32](2), Selector: metav1.LabelSelector{MatchLabels: sel},
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: sel}, Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.32.3",
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfigTemplate", Name: name}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachineTemplate", Name: name}}}}}
	}
	amp := &infrav1.AzureMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-mp-win", Labels: labels},
		Spec: infrav1.AzureMachinePoolSpec{ProviderID: "azure:///x", Template: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}, WindowsServerVersion: infrav1.WindowsServer2019}}}
	kc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": bootstrapGroupVersion, "kind": "KubeadmConfig",
		"metadata": map[string]any{"namespace": "default", "name": "demo-mp-win"}, "spec": map[string]any{}}}
	mp := &clusterv1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-mp-win", Labels: labels},
		Spec: clusterv1.MachinePoolSpec{ClusterName: "demo", Replicas: ptr.To[int32](3), Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{ClusterName: "demo",
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: "demo-mp-win"}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachinePool", Name: "demo-mp-win"}}}}}
	objs := []client.Object{
		amt("demo-md-win", infrav1.Windows, infrav1.WindowsServer2019), kct("demo-md-win"), md("demo-md-win"),
		amt("demo-md-0", infrav1.Linux, ""), kct("demo-md-0"), md("demo-md-0"),
		amt("demo-md-w22", infrav1.Windows, infrav1.WindowsServer2022), kct("demo-md-w22"), md("demo-md-w22"),
		amp, kc, mp,
	}
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(append(objs, extra...)...).Build()
}

func TestPlanWritesTheNewPools(t *testing.T) {
	p, err := Run(context.Background(), Options{Workload: workloadCluster(), Management: management(t), Namespace: "default", ClusterName: "demo",
		Target: infrav1.WindowsServer2022, Resolver: resolver()})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Pools) != 2 {
		t.Fatalf("pools %+v, want the 2019 MachineDeployment and MachinePool only", p.Pools)
	}
	md := p.Pools[0]
	if md.Kind != "MachineDeployment" || md.Name != "demo-md-win" || md.NewName != "demo-md-win-ws2022" || md.Replicas != 2 || md.From != infrav1.WindowsServer2019 {
		t.Errorf("MachineDeployment pool %+v", md)
	}
	docs := strings.Split(md.Manifest, "\n---\n")
	if len(docs) != 4 { // the comment, then three objects
		t.Fatalf("manifest has %d documents:\n%s", len(docs), md.Manifest)
	}
	var amt infrav1.AzureMachineTemplate
	var kct, mdu map[string]any
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &amt); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(docs[2]), &kct); err != nil {
		t.Fatal(err)
	}
	var mdObj clusterv1.MachineDeployment
	if err := yaml.UnmarshalStrict([]byte(docs[3]), &mdObj); err != nil {
		t.Fatal(err)
	}
	_ = yaml.Unmarshal([]byte(docs[3]), &mdu)
	if amt.Name != "demo-md-win-ws2022" || amt.Spec.Template.Spec.WindowsServerVersion != infrav1.WindowsServer2022 || amt.Spec.Template.Spec.VMSize != "Standard_D4s_v3" ||
		amt.UID != "" || len(amt.OwnerReferences) != 0 || amt.ResourceVersion != "" {
		t.Errorf("new AzureMachineTemplate %+v", amt.ObjectMeta)
	}
	if !strings.Contains(docs[2], "name: demo-md-win-ws2022-azure-json") || !strings.Contains(docs[2], "name: demo-md-win-ws2022\n") {
		t.Errorf("bootstrap template does not follow the new template's azure.json Secret:\n%s", docs[2])
	}
	s := mdObj.Spec
	if mdObj.Name != "demo-md-win-ws2022" || *s.Replicas != 2 || s.Template.Spec.InfrastructureRef.Name != "demo-md-win-ws2022" || s.Template.Spec.Bootstrap.ConfigRef.Name != "demo-md-win-ws2022" ||
		s.Selector.MatchLabels[clusterv1.MachineDeploymentNameLabel] != "demo-md-win-ws2022" || s.Template.Labels[clusterv1.MachineDeploymentNameLabel] != "demo-md-win-ws2022" ||
		len(mdObj.Annotations) != 0 || s.Template.Spec.Version != "v1.32.3" {
		t.Errorf("new MachineDeployment %+v", mdObj)
	}
	if _, ok := mdu["status"]; ok {
		t.Error("the new MachineDeployment carries a status")
	}
	mp := p.Pools[1]
	if mp.Kind != "MachinePool" || mp.NewName != "demo-mp-win-ws2022" || mp.Replicas != 3 {
		t.Errorf("MachinePool pool %+v", mp)
	}
	if !strings.Contains(mp.Manifest, "windowsServerVersion: \"2022\"") || strings.Contains(mp.Manifest, "providerID") || !strings.Contains(mp.Manifest, "kind: AzureMachinePool") {
		t.Errorf("MachinePool manifest:\n%s", mp.Manifest)
	}
	if fs := findings(p, CheckPools, "AzureMachinePool/default/demo-mp-win"); len(fs) != 0 {
		t.Errorf("pool findings %+v", fs)
	}
}

func TestPlanRefusesAPoolWhosePrefixCollides(t *testing.T) {
	// "other-ws2022" has the computer-name prefix win-s2022, the new pool's.
	taken := &infrav1.AzureMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other-ws2022", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
		Spec: infrav1.AzureMachinePoolSpec{Template: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}}}
	p, err := Run(context.Background(), Options{Workload: workloadCluster(), Management: management(t, taken), Namespace: "default", ClusterName: "demo",
		Target: infrav1.WindowsServer2022, Resolver: resolver()})
	if err != nil {
		t.Fatal(err)
	}
	fs := findings(p, CheckPools, "AzureMachinePool/default/demo-mp-win")
	if len(fs) != 1 || fs[0].Severity != doctor.Error || !strings.Contains(fs[0].Message, `"win-s2022" of AzureMachinePool other-ws2022`) {
		t.Errorf("collision findings %+v", fs)
	}
}

// A Windows template that pins no release may run another than the
// default: the plan reads it from the pool's nodes, else its image.
func TestPlanReadsTheReleaseOfAnUnpinnedPool(t *testing.T) {
	labels := map[string]string{clusterv1.ClusterNameLabel: "demo"}
	unpinned := func(name string, img *infrav1.Image) []client.Object {
		a := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels}}
		a.Spec.Template.Spec.VMSize = "Standard_D4s_v3"
		a.Spec.Template.Spec.OSDisk.OSType = infrav1.Windows
		a.Spec.Template.Spec.Image = img
		kct := &unstructured.Unstructured{Object: map[string]any{"apiVersion": bootstrapGroupVersion, "kind": "KubeadmConfigTemplate",
			"metadata": map[string]any{"namespace": "default", "name": name}, "spec": map[string]any{}}}
		md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
			Spec: clusterv1.MachineDeploymentSpec{ClusterName: "demo", Replicas: ptr.To[int32](1), Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{ClusterName: "demo",
				Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfigTemplate", Name: name}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachineTemplate", Name: name}}}}}
		return []client.Object{a, kct, md}
	}
	machine := func(name, md, node string) *clusterv1.Machine {
		return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "demo", clusterv1.MachineDeploymentNameLabel: md}},
			Spec:   clusterv1.MachineSpec{ClusterName: "demo"},
			Status: clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: node}}}
	}
	var extra []client.Object
	// Its nodes (win-a, win-b of the workload cluster) run 2019.
	extra = append(extra, unpinned("on-2019-nodes", nil)...)
	extra = append(extra, machine("m-a", "on-2019-nodes", "win-a"), machine("m-b", "on-2019-nodes", "win-b"))
	// No node yet, an image of 2019.
	extra = append(extra, unpinned("of-2019-image", &infrav1.Image{ComputeGallery: &infrav1.ComputeGalleryImage{Gallery: "ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019", Name: "capi-win-2019-containerd", Version: "latest"}})...)
	// No node, no image: the default its machines boot, 2022, the target.
	extra = append(extra, unpinned("on-default", nil)...)

	p, err := Run(context.Background(), Options{Workload: workloadCluster(), Management: management(t, extra...), Namespace: "default", ClusterName: "demo",
		Target: infrav1.WindowsServer2022, Resolver: resolver()})
	if err != nil {
		t.Fatal(err)
	}
	from := map[string]infrav1.WindowsServerVersion{}
	for _, po := range p.Pools {
		from[po.Name] = po.From
	}
	if from["on-2019-nodes"] != infrav1.WindowsServer2019 || from["of-2019-image"] != infrav1.WindowsServer2019 {
		t.Errorf("pools %v: want on-2019-nodes and of-2019-image replaced, from 2019", from)
	}
	if _, ok := from["on-default"]; ok {
		t.Errorf("pools %v: on-default boots the target already", from)
	}
	fs := findings(p, CheckPools, "MachineDeployment/default/on-2019-nodes")
	if len(fs) != 1 || !strings.Contains(fs[0].Message, "it runs Windows Server 2019, the release its nodes run (10.0.17763: win-a, win-b)") {
		t.Errorf("findings %+v", fs)
	}
	for _, po := range p.Pools {
		if po.Name == "on-2019-nodes" && !strings.Contains(po.Manifest, `windowsServerVersion: "2022"`) {
			t.Errorf("the new pool does not pin the target:\n%s", po.Manifest)
		}
	}
}

// Nodes of two releases in one unpinned pool: the new pool replaces it
// all, and the plan says so.
func TestPlanReplacesAnUnpinnedPoolOfTwoReleases(t *testing.T) {
	mp := &clusterv1.MachinePool{}
	c := management(t)
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "demo-mp-win"}, mp); err != nil {
		t.Fatal(err)
	}
	mp.Status.NodeRefs = []corev1.ObjectReference{{Kind: "Node", Name: "win-a"}, {Kind: "Node", Name: "win-c"}}
	if err := c.Update(context.Background(), mp); err != nil {
		t.Fatal(err)
	}
	amp := &infrav1.AzureMachinePool{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "demo-mp-win"}, amp); err != nil {
		t.Fatal(err)
	}
	amp.Spec.Template.WindowsServerVersion = ""
	if err := c.Update(context.Background(), amp); err != nil {
		t.Fatal(err)
	}
	wl := workloadCluster()
	if err := wl.Create(context.Background(), node("win-c", "windows", "10.0.20348")); err != nil {
		t.Fatal(err)
	}
	p, err := Run(context.Background(), Options{Workload: wl, Management: c, Namespace: "default", ClusterName: "demo",
		Target: infrav1.WindowsServer2022, Resolver: resolver()})
	if err != nil {
		t.Fatal(err)
	}
	var got *Pool
	for i := range p.Pools {
		if p.Pools[i].Name == "demo-mp-win" {
			got = &p.Pools[i]
		}
	}
	if got == nil || got.From != infrav1.WindowsServer2019 {
		t.Fatalf("pools %+v: want demo-mp-win replaced, from 2019", p.Pools)
	}
	fs := findings(p, CheckPools, "MachinePool/default/demo-mp-win")
	if len(fs) != 1 || fs[0].Severity != doctor.Warning || !strings.Contains(fs[0].Message, "Windows Server 2019 (win-a) and Windows Server 2022 (win-c)") {
		t.Errorf("findings %+v", fs)
	}
}
