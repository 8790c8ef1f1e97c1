// Package upgrade plans and runs the Kubernetes upgrade of a mixed
// Linux/Windows cluster: it checks what would go wrong (version skew,
// reference images of the target for every OS in use, the version-bound
// add-ons' images, a Windows Server release that would change with the
// nodes, disruption budgets that hold a drain, drains without a timeout),
// and then changes the control plane, the Linux pools and the Windows pools
// in that order, each once the one before has rolled out.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/kubeletflags"
)

// Finding is the doctor's, so that the plan prints and exits as doctor does.
type Finding = doctor.Finding

// Check names of the plan's findings.
const (
	CheckSkew           = "version-skew"
	CheckReferenceImage = "reference-images"
	CheckAddons         = "addon-images"
	CheckWindowsRelease = "windows-server-version"
	CheckPDBs           = "disruption-budgets"
	CheckDrain          = "drain-timeouts"
	CheckPools          = "pools"
	CheckKubeletFlags   = "kubelet-flags"
)

// MaxKubeletSkew is how many minors a kubelet may be older than the API
// server from Kubernetes 1.25 (kubernetes/website content/en/releases/
// version-skew-policy.md at 01bc0975, "kubelet").
const MaxKubeletSkew = 3

// Options say what to upgrade and how.
type Options struct {
	// Management holds the cluster's Cluster API objects (required).
	Management client.Client
	// Workload, when set, is read for the nodes' versions and Windows
	// builds and the PodDisruptionBudgets.
	Workload client.Client
	// Namespace and ClusterName name the Cluster in Management.
	Namespace, ClusterName string
	// Target is the Kubernetes version to move to (vX.Y.Z).
	Target string
	// Images is the catalog the reference images are looked up in (the
	// emulator's or Azure's, through internal/azure/vmimages); nil: not
	// checked, which the plan says.
	Images images.Lister
	// Progress receives a line per step and per change of its state
	// while Run applies; io.Discard when nil.
	Progress io.Writer
	// StepTimeout bounds the wait for each step (30 minutes when zero);
	// PollInterval is how often a step is looked at (5 seconds).
	StepTimeout, PollInterval time.Duration

	target images.Version
}

// Validate checks the options and parses the target.
func (o *Options) Validate() error {
	if o.Management == nil {
		return errors.New("upgrading needs the management cluster: the Cluster API objects are changed there")
	}
	if o.ClusterName == "" || o.Namespace == "" {
		return errors.New("name the cluster and its namespace in the management cluster")
	}
	v, err := ParseTarget(o.Target)
	if err != nil {
		return err
	}
	o.target = v
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.StepTimeout == 0 {
		o.StepTimeout = 30 * time.Minute
	}
	if o.PollInterval == 0 {
		o.PollInterval = 5 * time.Second
	}
	return nil
}

// ParseTarget reads a target version, vMAJOR.MINOR.PATCH.
func ParseTarget(s string) (images.Version, error) {
	v, err := images.ParseVersion(s)
	if err != nil || !strings.HasPrefix(s, "v") {
		return v, fmt.Errorf("--to %q: give the Kubernetes version as vMAJOR.MINOR.PATCH, such as v1.36.3", s)
	}
	return v, nil
}

// Step is one change of the upgrade, in the order it is made.
type Step struct {
	// Kind is KubeadmControlPlane, MachineDeployment or MachinePool.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// OS is linux or windows (the control plane is linux).
	OS string `json:"os"`
	// From is the version it has now.
	From string `json:"from"`
	// Windows is a Windows pool's Server release, which does not change.
	Windows infrav1.WindowsServerVersion `json:"windowsServerVersion,omitempty"`
	// NewTemplate names the AzureMachineTemplate written for it when its
	// image names a version ("" when the default image of the target is
	// resolved for the new machines).
	NewTemplate string `json:"newTemplate,omitempty"`
	// NewBootstrapTemplate names the KubeadmConfigTemplate written for a
	// MachineDeployment, or the KubeadmConfig written for a MachinePool,
	// whose kubelet args the target no longer knows: its own, without them.
	NewBootstrapTemplate string `json:"newBootstrapTemplate,omitempty"`
	// Manifest is the change as YAML (merge patches and new objects).
	Manifest string `json:"manifest"`

	obj       client.Object
	templates []client.Object
}

// Plan is the upgrade of one cluster.
type Plan struct {
	Cluster  string    `json:"cluster"`
	From     string    `json:"from"`
	Target   string    `json:"target"`
	Steps    []Step    `json:"steps"`
	Findings []Finding `json:"findings"`

	// fixed are the error findings (check/object) the plan's own steps
	// fix, which do not stop Run.
	fixed map[string]bool
}

// ExitCode is the doctor's: 0 clean, 1 warnings, 2 errors.
func (p *Plan) ExitCode() int { return doctor.Report{Findings: p.Findings}.ExitCode() }

func (p *Plan) add(check string, sev doctor.Severity, object, msg, fix string) {
	p.Findings = append(p.Findings, Finding{Check: check, Severity: sev, Object: object, Message: msg, Fix: fix})
}

// cluster is what the plan reads.
type cluster struct {
	c        *clusterv1.Cluster
	location string
	kcp      *controlplanev1.KubeadmControlPlane
	kcpAMT   *infrav1.AzureMachineTemplate
	mds      []pool
	mps      []pool
	machines []clusterv1.Machine
	nodes    map[string]*corev1.Node
	pdbs     []policyv1.PodDisruptionBudget
}

type pool struct {
	// kct is a MachineDeployment's KubeadmConfigTemplate, kc a
	// MachinePool's KubeadmConfig (nil for other bootstrap providers).
	kct     *bootstrapv1.KubeadmConfigTemplate
	kc      *bootstrapv1.KubeadmConfig
	md      *clusterv1.MachineDeployment
	mp      *clusterv1.MachinePool
	amt     *infrav1.AzureMachineTemplate
	amp     *infrav1.AzureMachinePool
	vm      *infrav1.AzureVMSpec
	version string
}

func (p pool) name() string {
	if p.md != nil {
		return p.md.Name
	}
	return p.mp.Name
}

func (p pool) kind() string {
	if p.md != nil {
		return "MachineDeployment"
	}
	return "MachinePool"
}

func (p pool) windows() bool { return p.vm.OSDisk.OSType == infrav1.Windows }

func (p pool) key() string { return p.kind() + "/" + p.name() }

func load(ctx context.Context, o *Options) (*cluster, error) {
	m, ns := o.Management, o.Namespace
	s := &cluster{c: &clusterv1.Cluster{}, nodes: map[string]*corev1.Node{}}
	if err := m.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.ClusterName}, s.c); err != nil {
		return nil, fmt.Errorf("reading Cluster %s/%s: %w", ns, o.ClusterName, err)
	}
	if s.c.Spec.Topology.IsDefined() {
		return s, nil
	}
	ref := s.c.Spec.ControlPlaneRef
	if ref.Kind != "KubeadmControlPlane" {
		return nil, fmt.Errorf("Cluster %s's control plane is a %s: winkube upgrades a KubeadmControlPlane; upgrade the control plane with its own provider", o.ClusterName, ref.Kind)
	}
	s.kcp = &controlplanev1.KubeadmControlPlane{}
	if err := m.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, s.kcp); err != nil {
		return nil, fmt.Errorf("reading KubeadmControlPlane %s/%s: %w", ns, ref.Name, err)
	}
	if ir := s.kcp.Spec.MachineTemplate.Spec.InfrastructureRef; ir.Kind == "AzureMachineTemplate" {
		s.kcpAMT = &infrav1.AzureMachineTemplate{}
		if err := m.Get(ctx, client.ObjectKey{Namespace: ns, Name: ir.Name}, s.kcpAMT); err != nil {
			return nil, fmt.Errorf("reading the control plane's AzureMachineTemplate %s: %w", ir.Name, err)
		}
	}
	if ir := s.c.Spec.InfrastructureRef; ir.Kind == "AzureCluster" {
		ac := &infrav1.AzureCluster{}
		if err := m.Get(ctx, client.ObjectKey{Namespace: ns, Name: ir.Name}, ac); err == nil {
			s.location = ac.Spec.Location
		}
	}
	sel := client.MatchingLabels{clusterv1.ClusterNameLabel: o.ClusterName}
	mds := &clusterv1.MachineDeploymentList{}
	if err := m.List(ctx, mds, client.InNamespace(ns), sel); err != nil {
		return nil, fmt.Errorf("listing the cluster's MachineDeployments: %w", err)
	}
	sort.Slice(mds.Items, func(i, j int) bool { return mds.Items[i].Name < mds.Items[j].Name })
	for i := range mds.Items {
		md := &mds.Items[i]
		ir := md.Spec.Template.Spec.InfrastructureRef
		if ir.Kind != "AzureMachineTemplate" {
			continue
		}
		amt := &infrav1.AzureMachineTemplate{}
		if err := m.Get(ctx, client.ObjectKey{Namespace: ns, Name: ir.Name}, amt); err != nil {
			return nil, fmt.Errorf("reading AzureMachineTemplate %s of MachineDeployment %s: %w", ir.Name, md.Name, err)
		}
		po := pool{md: md, amt: amt, vm: &amt.Spec.Template.Spec.AzureVMSpec, version: md.Spec.Template.Spec.Version}
		if br := md.Spec.Template.Spec.Bootstrap.ConfigRef; br.Kind == "KubeadmConfigTemplate" {
			po.kct = &bootstrapv1.KubeadmConfigTemplate{}
			if err := m.Get(ctx, client.ObjectKey{Namespace: ns, Name: br.Name}, po.kct); err != nil {
				return nil, fmt.Errorf("reading KubeadmConfigTemplate %s of MachineDeployment %s: %w", br.Name, md.Name, err)
			}
		}
		s.mds = append(s.mds, po)
	}
	mps := &clusterv1.MachinePoolList{}
	if err := m.List(ctx, mps, client.InNamespace(ns), sel); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing the cluster's MachinePools: %w", err)
	}
	sort.Slice(mps.Items, func(i, j int) bool { return mps.Items[i].Name < mps.Items[j].Name })
	for i := range mps.Items {
		mp := &mps.Items[i]
		ir := mp.Spec.Template.Spec.InfrastructureRef
		if ir.Kind != "AzureMachinePool" {
			continue
		}
		amp := &infrav1.AzureMachinePool{}
		if err := m.Get(ctx, client.ObjectKey{Namespace: ns, Name: ir.Name}, amp); err != nil {
			return nil, fmt.Errorf("reading AzureMachinePool %s of MachinePool %s: %w", ir.Name, mp.Name, err)
		}
		po := pool{mp: mp, amp: amp, vm: &amp.Spec.Template, version: mp.Spec.Template.Spec.Version}
		if br := mp.Spec.Template.Spec.Bootstrap.ConfigRef; br.Kind == "KubeadmConfig" {
			po.kc = &bootstrapv1.KubeadmConfig{}
			if err := m.Get(ctx, client.ObjectKey{Namespace: ns, Name: br.Name}, po.kc); err != nil {
				return nil, fmt.Errorf("reading KubeadmConfig %s of MachinePool %s: %w", br.Name, mp.Name, err)
			}
		}
		s.mps = append(s.mps, po)
	}
	machines := &clusterv1.MachineList{}
	if err := m.List(ctx, machines, client.InNamespace(ns), sel); err != nil {
		return nil, fmt.Errorf("listing the cluster's Machines: %w", err)
	}
	s.machines = machines.Items
	if o.Workload != nil {
		nodes := &corev1.NodeList{}
		if err := o.Workload.List(ctx, nodes); err != nil {
			return nil, fmt.Errorf("listing the workload cluster's nodes: %w", err)
		}
		for i := range nodes.Items {
			s.nodes[nodes.Items[i].Name] = &nodes.Items[i]
		}
		pdbs := &policyv1.PodDisruptionBudgetList{}
		if err := o.Workload.List(ctx, pdbs); err != nil {
			return nil, fmt.Errorf("listing the workload cluster's PodDisruptionBudgets: %w", err)
		}
		s.pdbs = pdbs.Items
	}
	return s, nil
}

// Build plans the upgrade: the findings and the steps, changing nothing.
func Build(ctx context.Context, o Options) (*Plan, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return build(ctx, &o)
}

func build(ctx context.Context, o *Options) (*Plan, error) {
	s, err := load(ctx, o)
	if err != nil {
		return nil, err
	}
	p := &Plan{Cluster: o.Namespace + "/" + o.ClusterName, Target: o.target.String()}
	if s.c.Spec.Topology.IsDefined() {
		p.From = s.c.Spec.Topology.Version
		p.add(CheckPools, doctor.Error, "Cluster/"+o.Namespace+"/"+o.ClusterName, "the Cluster is managed by its topology (ClusterClass): its version is spec.topology.version, and Cluster API rolls the control plane and the pools from it",
			fmt.Sprintf("set spec.topology.version to %s on the Cluster; pin windowsServerVersion in the Windows classes' AzureMachineTemplates first", o.target))
		return p, nil
	}
	// What the control plane runs: its lowest machine's version (the
	// spec's is where it is going).
	p.From = s.kcp.Spec.Version
	if low := lowest(s.kcp.Status.Versions); low != "" {
		p.From = low
	}
	pl := &planner{o: o, s: s, p: p}
	pl.pinReleases()
	pl.skew()
	pl.referenceImages(ctx)
	pl.addons()
	pl.windowsReleases()
	pl.disruptionBudgets()
	pl.drainTimeouts()
	pl.kubeletFlags()
	if err := pl.steps(); err != nil {
		return nil, err
	}
	doctor.SortFindings(p.Findings)
	return p, nil
}

type planner struct {
	o *Options
	s *cluster
	p *Plan
	// release is each Windows pool's Windows Server release after the
	// upgrade, by pool.key(); pinned are the pools whose template names
	// none, which the plan's steps pin; mixed, those whose nodes run two
	// releases, which the plan cannot pin.
	release       map[string]infrav1.WindowsServerVersion
	pinned, mixed map[string]bool
}

func minorsBehind(v string, target images.Version) (int, bool) {
	pv, err := images.ParseVersion(v)
	if err != nil || pv.Major != target.Major {
		return 0, false
	}
	return target.Minor - pv.Minor, true
}

func newer(a, b images.Version) bool {
	if a.Major != b.Major {
		return a.Major > b.Major
	}
	if a.Minor != b.Minor {
		return a.Minor > b.Minor
	}
	return a.Patch > b.Patch
}

// skew: kubeadm upgrades the control plane one minor at a time and never
// down (kubernetes/kubernetes cmd/kubeadm/app/phases/upgrade/policy.go at
// 04791b49, EnforceVersionPolicies); a kubelet may be up to three minors
// older than the API server (the version-skew policy), so a pool that far
// behind must move before the control plane does.
func (pl *planner) skew() {
	t, kcp := pl.o.target, pl.s.kcp
	obj := "KubeadmControlPlane/" + kcp.Namespace + "/" + kcp.Name
	// The control plane's version is its lowest machine's while it rolls.
	cur := kcp.Spec.Version
	if low := lowest(kcp.Status.Versions); low != "" && kcp.Spec.Version != pl.o.Target {
		cur = low
	}
	cv, err := images.ParseVersion(cur)
	if err != nil {
		pl.p.add(CheckSkew, doctor.Error, obj, fmt.Sprintf("the control plane's version %q cannot be read: %v", cur, err), "set spec.version to the version the control plane runs")
		return
	}
	if kcp.Spec.Version != pl.o.Target && len(kcp.Status.Versions) > 1 {
		pl.p.add(CheckSkew, doctor.Error, obj, fmt.Sprintf("the control plane is still rolling out %s (machines at %s)", kcp.Spec.Version, versions(kcp.Status.Versions)),
			"wait until every control-plane machine runs "+kcp.Spec.Version+", then plan again")
	}
	switch {
	case newer(cv, t):
		pl.p.add(CheckSkew, doctor.Error, obj, fmt.Sprintf("%s is older than the control plane's %s: kubeadm does not downgrade a cluster", t, cv),
			"name a version at or after "+cv.String())
	case cv.Major != t.Major || t.Minor > cv.Minor+1:
		pl.p.add(CheckSkew, doctor.Error, obj, fmt.Sprintf("%s is %d minors after the control plane's %s: kubeadm upgrades one minor at a time", t, t.Minor-cv.Minor, cv),
			fmt.Sprintf("upgrade to the newest v1.%d patch first, then to %s", cv.Minor+1, t))
	}
	for _, ps := range [][]pool{pl.s.mds, pl.s.mps} {
		for _, po := range ps {
			if behind, ok := minorsBehind(po.version, t); ok && behind > MaxKubeletSkew {
				pl.p.add(CheckSkew, doctor.Error, po.kind()+"/"+kcp.Namespace+"/"+po.name(),
					fmt.Sprintf("its kubelets run %s, %d minors behind %s: a kubelet may be at most %d minors older than the API server", po.version, behind, t, MaxKubeletSkew),
					fmt.Sprintf("upgrade %s to v1.%d or later before the control plane moves", po.name(), t.Minor-MaxKubeletSkew))
			}
		}
	}
	for _, n := range pl.clusterNodes() {
		if behind, ok := minorsBehind(n.Status.NodeInfo.KubeletVersion, t); ok && behind > MaxKubeletSkew {
			pl.p.add(CheckSkew, doctor.Error, "Node/"+n.Name,
				fmt.Sprintf("its kubelet runs %s, %d minors behind %s: a kubelet may be at most %d minors older than the API server", n.Status.NodeInfo.KubeletVersion, behind, t, MaxKubeletSkew),
				"replace the node (its pool's version) before the control plane moves")
		}
	}
}

// lowest is the oldest version machines run ("" when none is reported).
func lowest(vs []clusterv1.StatusVersion) string {
	out, low := "", images.Version{}
	for _, v := range vs {
		pv, err := images.ParseVersion(v.Version)
		if err == nil && (out == "" || newer(low, pv)) {
			out, low = v.Version, pv
		}
	}
	return out
}

func versions(vs []clusterv1.StatusVersion) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("%s (%d)", v.Version, v.Replicas)
	}
	return strings.Join(out, ", ")
}

// clusterNodes are the workload nodes of the cluster's Machines and
// MachinePools.
func (pl *planner) clusterNodes() []*corev1.Node {
	var names []string
	for i := range pl.s.machines {
		if m := &pl.s.machines[i]; m.Status.NodeRef.IsDefined() {
			names = append(names, m.Status.NodeRef.Name)
		}
	}
	for _, po := range pl.s.mps {
		for _, r := range po.mp.Status.NodeRefs {
			names = append(names, r.Name)
		}
	}
	return pl.nodesNamed(names)
}

// nodesNamed are the workload nodes of names, each once, by name.
func (pl *planner) nodesNamed(names []string) []*corev1.Node {
	slices.Sort(names)
	var out []*corev1.Node
	for _, name := range slices.Compact(names) {
		if n := pl.s.nodes[name]; n != nil {
			out = append(out, n)
		}
	}
	return out
}

// referenceImages: every machine the upgrade makes boots the reference
// image of the target for its OS (the resolver's choice for a template
// without an image, or a community-gallery image moved to the target's
// version); a target the catalog has no image of cannot roll that pool.
func (pl *planner) referenceImages(ctx context.Context) {
	type want struct {
		os  infrav1.OSType
		win infrav1.WindowsServerVersion
	}
	users := map[want][]string{}
	add := func(vm *infrav1.AzureVMSpec, obj string, win infrav1.WindowsServerVersion) {
		if vm.Image != nil && !galleryVersioned(vm.Image) {
			pl.p.add(CheckReferenceImage, doctor.Warning, obj, fmt.Sprintf("it names its own image (%s), which the upgrade keeps", images.DescribeImage(vm.Image)),
				fmt.Sprintf("make sure the image carries Kubernetes %s's kubelet, or write a template with one that does", pl.o.target))
			return
		}
		w := want{os: osOf(vm), win: win}
		users[w] = append(users[w], obj)
	}
	if pl.s.kcpAMT != nil {
		add(&pl.s.kcpAMT.Spec.Template.Spec.AzureVMSpec, "KubeadmControlPlane/"+pl.s.kcp.Namespace+"/"+pl.s.kcp.Name, "")
	}
	for _, ps := range [][]pool{pl.s.mds, pl.s.mps} {
		for _, po := range ps {
			add(po.vm, po.kind()+"/"+pl.o.Namespace+"/"+po.name(), pl.release[po.key()])
		}
	}
	keys := make([]want, 0, len(users))
	for k := range users {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return string(keys[i].os)+string(keys[i].win) < string(keys[j].os)+string(keys[j].win)
	})
	if pl.o.Images == nil {
		if len(keys) > 0 {
			pl.p.add(CheckReferenceImage, doctor.Warning, "", "the reference images of "+pl.o.target.String()+" were not looked up (no image catalog given)",
				"run the plan with the catalog of the cluster's cloud (--arm-endpoint) to check them")
		}
		return
	}
	r := images.NewResolver(pl.o.Images, time.Minute)
	for _, k := range keys {
		what := "Linux"
		if k.os == infrav1.Windows {
			what = "Windows Server " + string(k.win)
		}
		_, err := r.Resolve(ctx, nil, images.Request{Location: pl.s.location, KubernetesVersion: pl.o.Target, OS: k.os, WindowsVersion: k.win})
		if err != nil {
			fix := "pick a version the catalog has a reference image of ('winkube images list'), or set spec.image in a new template to an image of your own"
			if k.os == infrav1.Windows {
				if ok, _ := images.WindowsSupported(k.win, pl.o.target); !ok {
					fix = fmt.Sprintf("move the pools to a newer Windows Server first ('winkube plan windows-upgrade --to %s'), then upgrade", infrav1.WindowsServer2022)
				}
			}
			pl.p.add(CheckReferenceImage, doctor.Error, strings.Join(users[k], ","),
				fmt.Sprintf("no %s reference image of %s for %s: %v", what, pl.o.target, strings.Join(users[k], ", "), err), fix)
		}
	}
}

func osOf(vm *infrav1.AzureVMSpec) infrav1.OSType {
	if vm.OSDisk.OSType == infrav1.Windows {
		return infrav1.Windows
	}
	return infrav1.Linux
}

// galleryVersioned: a community-gallery reference image, whose version is
// the Kubernetes version (the upgrade moves it).
func galleryVersioned(img *infrav1.Image) bool {
	g := img.ComputeGallery
	return g != nil && g.Gallery == images.CommunityGallery && g.SubscriptionID == nil
}

// addons: the version-bound add-ons need an image published for the
// target (kube-proxy for Windows is built per Kubernetes release; the cloud
// provider has a release per minor), and the others a release whose
// Kubernetes range covers it.
func (pl *planner) addons() {
	t, l := pl.o.target, pl.s.c.Labels
	obj := "Cluster/" + pl.o.Namespace + "/" + pl.o.ClusterName
	if l["windows"] == "enabled" && l["cni-windows"] == "calico" {
		img := flavors.KubeProxyWindowsImage(t)
		if _, ok := flavors.PublishedAddonImage(img); !ok {
			pl.p.add(CheckAddons, doctor.Error, obj, fmt.Sprintf("kube-proxy for Windows has no image for %s (%s is not published)", t, img),
				fmt.Sprintf("upgrade to a version from v1.%d, which sig-windows-tools builds kube-proxy images for", flavors.KubeProxyCalicoMinMinor))
		}
	}
	if l[flavors.CloudProviderLabel] == flavors.CloudProviderAzure {
		if _, _, ok := flavors.CloudProviderAzureImages(t.Minor); !ok {
			pl.p.add(CheckAddons, doctor.Error, obj, fmt.Sprintf("cloud-provider-azure has no release for Kubernetes 1.%d: the cloud controller and node managers could not follow", t.Minor),
				"upgrade to a minor the cloud-provider-azure chart lists (1.21 to 1.36)")
		}
	}
	for _, r := range flavors.AddonRanges {
		if v := l[r.Label]; v == "" || v == "disabled" || (r.Label == "cni" && v != "calico") {
			continue
		}
		switch {
		case t.Minor < r.FirstMinor:
			pl.p.add(CheckAddons, doctor.Error, obj, fmt.Sprintf("%s %s does not support Kubernetes 1.%d (1.%d and later; %s)", r.Addon, r.Release, t.Minor, r.FirstMinor, r.Source),
				"upgrade to v1."+fmt.Sprint(r.FirstMinor)+" or later")
		case r.LastMinor != 0 && t.Minor > r.LastMinor:
			pl.p.add(CheckAddons, doctor.Warning, obj, fmt.Sprintf("%s %s is tested up to Kubernetes 1.%d, not 1.%d: %s (%s)", r.Addon, r.Release, r.LastMinor, t.Minor, r.Beyond, r.Source),
				"watch the add-on's pods after the upgrade; move the add-on to a release tested with 1."+fmt.Sprint(t.Minor)+" when there is one")
		}
	}
}

// pinReleases: a Windows template without windowsServerVersion boots the
// default release of whatever creates its machines, and that default moves
// (CAPZ's was Windows Server 2019, DefaultWindowsOsAndVersion in
// kubernetes-sigs/cluster-api-provider-azure azure/defaults.go at
// 2d1e96bf8ab37e3da96b68ba086988163e132c3d, and is 2022 since May 2026),
// so an upgrade could change a pool's OS silently. The plan's steps pin the release the pool runs now:
// its nodes' build, else its image's release, else the default its
// machines boot today.
func (pl *planner) pinReleases() {
	pl.release, pl.pinned, pl.mixed = map[string]infrav1.WindowsServerVersion{}, map[string]bool{}, map[string]bool{}
	for _, ps := range [][]pool{pl.s.mds, pl.s.mps} {
		for _, po := range ps {
			if !po.windows() {
				continue
			}
			if rel := po.vm.WindowsServerVersion; rel != "" {
				pl.release[po.key()] = rel
				continue
			}
			obj := po.kind() + "/" + pl.o.Namespace + "/" + po.name()
			// What the provider boots for an unset release.
			pl.release[po.key()] = images.DefaultWindowsRelease
			builds := map[string]string{}
			for _, n := range pl.poolNodes(po) {
				builds[n.Name] = windowsBuild(n)
			}
			pr := images.RunningRelease(po.vm.Image, builds)
			if pr.Release == "" {
				pl.mixed[po.key()] = true
				pl.p.add(CheckWindowsRelease, doctor.Error, obj,
					fmt.Sprintf("its template does not pin windowsServerVersion and its nodes run two releases, %s: the plan cannot tell which one the new machines should boot, and they would boot Windows Server %s", pr.Releases(), images.DefaultWindowsRelease),
					"set windowsServerVersion in a new template for the pool to the release to keep, move the other release's workloads deliberately ('winkube plan windows-upgrade'), then plan again")
				continue
			}
			rel, why := pr.Release, pr.Why
			if po.amp != nil && rel != images.DefaultWindowsRelease && (po.amp.Status.Replicas > 0 || len(po.amp.Spec.ProviderIDList) > 0) {
				// winkube's AzureMachinePool webhook reads an unset
				// release as 2022 and refuses another on a pool in use
				// (internal/webhooks/azuremachinepool.go ValidateUpdate):
				// the per-node check below names the change instead.
				continue
			}
			pl.release[po.key()], pl.pinned[po.key()] = rel, true
			where := "the upgrade's change of AzureMachinePool "
			if po.amp != nil {
				where += po.amp.Name
			} else {
				where = "the upgrade's new AzureMachineTemplate " + newTemplateName(po.amt.Name, pl.o.target)
			}
			pl.p.add(CheckWindowsRelease, doctor.Info, obj,
				fmt.Sprintf("its template does not pin windowsServerVersion: %s pins Windows Server %s, %s, so the new machines keep their OS", where, rel, why), "")
		}
	}
}

// windowsBuild is a Windows node's build: the label its kubelet sets, else
// its kernel version.
func windowsBuild(n *corev1.Node) string {
	if b := n.Labels[windowsBuildLabel]; b != "" {
		return b
	}
	if n.Labels[corev1.LabelOSStable] == "windows" {
		return n.Status.NodeInfo.KernelVersion
	}
	return ""
}

const windowsBuildLabel = "node.kubernetes.io/windows-build"

// windowsReleases: the release each Windows pool boots after the upgrade
// (pinReleases) must still be supported on the target, and nodes of
// another release would change OS when the upgrade replaces them.
func (pl *planner) windowsReleases() {
	for _, ps := range [][]pool{pl.s.mds, pl.s.mps} {
		for _, po := range ps {
			if !po.windows() {
				continue
			}
			obj := po.kind() + "/" + pl.o.Namespace + "/" + po.name()
			rel := pl.release[po.key()]
			if ok, why := images.WindowsSupported(rel, pl.o.target); !ok {
				pl.p.add(CheckWindowsRelease, doctor.Error, obj, why, fmt.Sprintf("move the pool to Windows Server 2022 or 2025 first ('winkube plan windows-upgrade --to 2022'), then upgrade to %s", pl.o.target))
			}
			if pl.mixed[po.key()] {
				continue // said once for the pool
			}
			for _, node := range pl.poolNodes(po) {
				b := windowsBuild(node)
				if now := images.WindowsRelease(b); now != "" && now != rel {
					pl.p.add(CheckWindowsRelease, doctor.Error, obj,
						fmt.Sprintf("node %s runs Windows Server %s (%s) but the pool's template boots Windows Server %s: the upgrade would replace it with a %s node, and process-isolated %s containers would not start there", node.Name, now, b, rel, rel, now),
						fmt.Sprintf("set windowsServerVersion: %q in a new template for the pool first, or move its workloads deliberately with 'winkube plan windows-upgrade --to %s'", now, rel))
				}
			}
		}
	}
}

// poolNodes are the workload nodes of a pool: its Machines' and, for a
// MachinePool, the nodes it lists itself. Cluster API's MachinePool
// controller lists them in status.nodeRefs by provider ID, and makes a
// Machine per instance only when the infrastructure pool opts in
// (status.infrastructureMachineKind), labelled cluster.x-k8s.io/pool-name
// with the pool's name as a label value (kubernetes-sigs/cluster-api
// v1.14.2, core/reconcilers/machinepool/machinepool_controller_noderef.go
// reconcileNodeRefs and machinepool_controller_phases.go
// computeDesiredMachine; read at 027f2a36dd5dfc764ff5fd78d4fefef8e23c18ed).
func (pl *planner) poolNodes(po pool) []*corev1.Node {
	var names []string
	for i := range pl.s.machines {
		m := &pl.s.machines[i]
		owned := po.md != nil && m.Labels[clusterv1.MachineDeploymentNameLabel] == po.md.Name ||
			po.mp != nil && m.Labels[clusterv1.MachinePoolNameLabel] == format.MustFormatValue(po.mp.Name)
		if owned && m.Status.NodeRef.IsDefined() {
			names = append(names, m.Status.NodeRef.Name)
		}
	}
	if po.mp != nil {
		for _, r := range po.mp.Status.NodeRefs {
			names = append(names, r.Name)
		}
	}
	return pl.nodesNamed(names)
}

// disruptionBudgets: every node is drained; a budget that allows no
// disruption holds a drain until it times out (or forever).
func (pl *planner) disruptionBudgets() {
	for _, pdb := range pl.s.pdbs {
		if pdb.Status.DisruptionsAllowed > 0 || pdb.Status.ExpectedPods == 0 {
			continue
		}
		pl.p.add(CheckPDBs, doctor.Warning, "PodDisruptionBudget/"+pdb.Namespace+"/"+pdb.Name,
			fmt.Sprintf("it allows no disruption (%d healthy of %d desired): draining a node with one of its pods waits until the drain times out", pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy),
			"scale the workload up by one (or lower minAvailable) before upgrading, so that one pod at a time may move")
	}
}

// drainTimeouts: a Windows pool's new nodes pull multi-gigabyte images, so
// a drain held by a budget can outlast them; without nodeDrainTimeout it
// never ends.
func (pl *planner) drainTimeouts() {
	for _, po := range pl.s.mds {
		d := po.md.Spec.Template.Spec.Deletion
		if d.NodeDrainTimeoutSeconds != nil && *d.NodeDrainTimeoutSeconds > 0 {
			continue
		}
		sev, why := doctor.Warning, "a drain held by a disruption budget never ends and the rollout stops there"
		if !po.windows() && len(pl.s.pdbs) == 0 {
			continue
		}
		pl.p.add(CheckDrain, sev, "MachineDeployment/"+pl.o.Namespace+"/"+po.name(), "it sets no nodeDrainTimeoutSeconds: "+why,
			"set spec.template.spec.deletion.nodeDrainTimeoutSeconds (for example 1800 for Windows pools, whose replacements pull large images)")
	}
}

// removedKubeletArgs are the kubelet extra args of a bootstrap config
// that a kubelet of the target no longer accepts.
func removedKubeletArgs(spec *bootstrapv1.KubeadmConfigSpec, target string) []kubeletflags.Flag {
	var names []string
	for _, regs := range [][]bootstrapv1.Arg{spec.InitConfiguration.NodeRegistration.KubeletExtraArgs, spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs} {
		for _, a := range regs {
			if !slices.Contains(names, a.Name) {
				names = append(names, a.Name)
			}
		}
	}
	return kubeletflags.Unknown(names, target)
}

func describeFlags(fs []kubeletflags.Flag) string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = "--" + f.Name + " (removed in " + f.Removed + ")"
	}
	return strings.Join(out, ", ")
}

// kubeletFlags: a kubelet exits on a flag its release removed, so a
// machine booted on the target from a bootstrap config passing one never
// becomes a node and the rollout stops there. The plan's steps fix each:
//   - a MachineDeployment gets a new KubeadmConfigTemplate without the flags
//     (templates are immutable by convention, and Cluster API rolls a
//     MachineDeployment whose bootstrap configRef changes,
//     MachineTemplateUpToDate in cluster-api
//     internal/controllers/machinedeployment/mdutil/util.go at
//     99d75597b5bd30c31245101b413d27997038ba32);
//   - the control plane's kubeadmConfigSpec loses them in the same change
//     as its version, so one rollout makes both (KubeadmControlPlane's
//     webhook lets nodeRegistration change, and a machine whose
//     KubeadmConfig differs from the spec is rolled: cluster-api v1.14.2
//     controlplane/kubeadm/webhooks/admission/kubeadmcontrolplane.go
//     ValidateUpdate's allowed paths, controlplane/kubeadm/pkg/filters.go
//     matchesKubeadmConfig);
//   - a MachinePool gets a new KubeadmConfig without them: the kubeadm
//     bootstrap provider never writes a MachinePool's bootstrap data again
//     once made, so an edit of the old one would reach no machine, and the
//     MachinePool controller takes the data of whatever config its configRef
//     names (cluster-api v1.14.2
//     bootstrap/kubeadm/reconcilers/kubeadmconfig/kubeadmconfig_controller.go
//     reconcile, "the config is already generated";
//     core/reconcilers/machinepool/machinepool_controller_phases.go
//     reconcileBootstrap).
func (pl *planner) kubeletFlags() {
	t := pl.o.Target
	says := func(fs []kubeletflags.Flag) string {
		return fmt.Sprintf("passes %s to the kubelet: a %s kubelet exits on it (unknown flag), so the machines the upgrade boots never join", describeFlags(fs), t)
	}
	fixed := func(obj string) {
		if pl.p.fixed == nil {
			pl.p.fixed = map[string]bool{}
		}
		pl.p.fixed[CheckKubeletFlags+"/"+obj] = true
	}
	if fs := removedKubeletArgs(&pl.s.kcp.Spec.KubeadmConfigSpec, t); len(fs) > 0 {
		kcp := pl.s.kcp
		obj := "KubeadmControlPlane/" + kcp.Namespace + "/" + kcp.Name
		pl.p.add(CheckKubeletFlags, doctor.Error, obj, "its kubeadmConfigSpec "+says(fs),
			fmt.Sprintf("remove %s from spec.kubeadmConfigSpec's nodeRegistration.kubeletExtraArgs with the version: the plan's step for %s does both in one change ('winkube plan upgrade --apply' makes it)", flagNames(fs), kcp.Name))
		fixed(obj)
	}
	for _, po := range pl.s.mds {
		if po.kct == nil {
			continue
		}
		if fs := removedKubeletArgs(&po.kct.Spec.Template.Spec, t); len(fs) > 0 {
			obj := "MachineDeployment/" + pl.o.Namespace + "/" + po.name()
			pl.p.add(CheckKubeletFlags, doctor.Error, obj, "its KubeadmConfigTemplate "+po.kct.Name+" "+says(fs),
				fmt.Sprintf("a new KubeadmConfigTemplate %s without %s, referenced by the MachineDeployment's spec.template.spec.bootstrap.configRef: the plan's step for %s writes both ('winkube plan upgrade --apply' makes them)",
					newTemplateName(po.kct.Name, pl.o.target), flagNames(fs), po.name()))
			fixed(obj)
		}
	}
	for _, po := range pl.s.mps {
		if po.kc == nil {
			continue
		}
		if fs := removedKubeletArgs(&po.kc.Spec, t); len(fs) > 0 {
			obj := "MachinePool/" + pl.o.Namespace + "/" + po.name()
			pl.p.add(CheckKubeletFlags, doctor.Error, obj, "its KubeadmConfig "+po.kc.Name+" "+says(fs),
				fmt.Sprintf("a new KubeadmConfig %s without %s, referenced by the MachinePool's spec.template.spec.bootstrap.configRef (editing %s would change no machine: its bootstrap data is made once): the plan's step for %s writes both ('winkube plan upgrade --apply' makes them)",
					newTemplateName(po.kc.Name, pl.o.target), flagNames(fs), po.kc.Name, po.name()))
			fixed(obj)
		}
	}
}

func flagNames(fs []kubeletflags.Flag) string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = "--" + f.Name
	}
	return strings.Join(out, " and ")
}

// withoutKubeletArgs is a KubeadmConfigTemplate's copy, named name,
// without the kubelet args fs.
func withoutKubeletArgs(kct *bootstrapv1.KubeadmConfigTemplate, name string, fs []kubeletflags.Flag) *bootstrapv1.KubeadmConfigTemplate {
	n := &bootstrapv1.KubeadmConfigTemplate{}
	n.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplate"))
	n.Name, n.Namespace, n.Labels = name, kct.Namespace, kct.Labels
	n.Spec = *kct.Spec.DeepCopy()
	dropKubeletArgs(&n.Spec.Template.Spec, fs)
	return n
}

// configWithoutKubeletArgs is a MachinePool's KubeadmConfig's copy, named
// name, without the kubelet args fs and without its bootstrap token: the
// kubeadm bootstrap provider wrote that token into the old config and
// rotates it there, and it makes the new config its own when none is set
// (cluster-api v1.14.2 kubeadmconfig_controller.go reconcileDiscovery); a
// token is a credential that no written manifest should carry.
func configWithoutKubeletArgs(kc *bootstrapv1.KubeadmConfig, name string, fs []kubeletflags.Flag) *bootstrapv1.KubeadmConfig {
	n := &bootstrapv1.KubeadmConfig{}
	n.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	n.Name, n.Namespace, n.Labels = name, kc.Namespace, kc.Labels
	n.Spec = *kc.Spec.DeepCopy()
	dropKubeletArgs(&n.Spec, fs)
	n.Spec.JoinConfiguration.Discovery.BootstrapToken.Token = ""
	return n
}

// dropKubeletArgs removes the kubelet args fs from a bootstrap config's
// init and join registrations; a list left empty becomes nil, which the
// API leaves out (it takes no empty list: MinItems 1).
func dropKubeletArgs(spec *bootstrapv1.KubeadmConfigSpec, fs []kubeletflags.Flag) {
	drop := func(args []bootstrapv1.Arg) []bootstrapv1.Arg {
		out := slices.DeleteFunc(args, func(a bootstrapv1.Arg) bool {
			return slices.ContainsFunc(fs, func(f kubeletflags.Flag) bool { return f.Name == a.Name })
		})
		if len(out) == 0 {
			return nil
		}
		return out
	}
	spec.InitConfiguration.NodeRegistration.KubeletExtraArgs = drop(spec.InitConfiguration.NodeRegistration.KubeletExtraArgs)
	spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = drop(spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs)
}

// kubeletArgsPatch is the part of a merge patch of a KubeadmControlPlane's
// spec that drops the kubelet args fs: a merge patch replaces a list
// whole, so each registration that changes gets its remaining args (or
// null, which removes the list).
func kubeletArgsPatch(spec *bootstrapv1.KubeadmConfigSpec, fs []kubeletflags.Flag) (string, error) {
	kept := spec.DeepCopy()
	dropKubeletArgs(kept, fs)
	cfg := map[string]any{}
	for _, r := range []struct {
		field     string
		old, kept []bootstrapv1.Arg
	}{
		{"initConfiguration", spec.InitConfiguration.NodeRegistration.KubeletExtraArgs, kept.InitConfiguration.NodeRegistration.KubeletExtraArgs},
		{"joinConfiguration", spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs, kept.JoinConfiguration.NodeRegistration.KubeletExtraArgs},
	} {
		if len(r.old) == len(r.kept) {
			continue
		}
		var v any
		if len(r.kept) > 0 {
			v = r.kept
		}
		cfg[r.field] = map[string]any{"nodeRegistration": map[string]any{"kubeletExtraArgs": v}}
	}
	b, err := yaml.Marshal(map[string]any{"kubeadmConfigSpec": cfg})
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, line := range strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n") {
		out.WriteString("  " + line)
	}
	return out.String() + "\n", nil
}

// steps writes the changes in order: the control plane, then the Linux
// pools, then the Windows pools (CAPI #7547: a pool changed while the
// control plane rolls can stick).
func (pl *planner) steps() error {
	t := pl.o.Target
	kcp := pl.s.kcp
	spec := "  version: " + t + "\n"
	if fs := removedKubeletArgs(&kcp.Spec.KubeadmConfigSpec, t); len(fs) > 0 {
		args, err := kubeletArgsPatch(&kcp.Spec.KubeadmConfigSpec, fs)
		if err != nil {
			return err
		}
		spec += args
	}
	pl.p.Steps = append(pl.p.Steps, Step{Kind: "KubeadmControlPlane", Name: kcp.Name, OS: "linux", From: pl.p.From, obj: kcp,
		Manifest: patchDoc("KubeadmControlPlane", controlplanev1.GroupVersion.String(), kcp.Namespace, kcp.Name, spec)})
	for _, windows := range []bool{false, true} {
		for _, po := range pl.s.mds {
			if po.windows() != windows {
				continue
			}
			st, err := pl.mdStep(po)
			if err != nil {
				return err
			}
			pl.p.Steps = append(pl.p.Steps, st)
		}
		for _, po := range pl.s.mps {
			if po.windows() != windows {
				continue
			}
			st, err := pl.mpStep(po)
			if err != nil {
				return err
			}
			pl.p.Steps = append(pl.p.Steps, st)
		}
	}
	return nil
}

func osName(windows bool) string {
	if windows {
		return "windows"
	}
	return "linux"
}

func patchDoc(kind, apiVersion, ns, name, spec string) string {
	return fmt.Sprintf("# kubectl patch %s %s -n %s --type merge --patch-file <this file>\napiVersion: %s\nkind: %s\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n%s",
		strings.ToLower(kind), name, ns, apiVersion, kind, name, ns, spec)
}

// mdStep: a MachineDeployment's version; when its template names a
// community-gallery image, a new AzureMachineTemplate with the target's
// version of it (templates are immutable), and a bootstrap template that
// reads the new template's cloud config Secret.
func (pl *planner) mdStep(po pool) (Step, error) {
	md := po.md
	st := Step{Kind: "MachineDeployment", Name: md.Name, OS: osName(po.windows()), From: po.version, obj: md, Windows: pl.release[po.key()]}
	spec := "  template:\n    spec:\n      version: " + pl.o.Target + "\n"
	moveImage := po.vm.Image != nil && galleryVersioned(po.vm.Image) && po.vm.Image.ComputeGallery.Version != strings.TrimPrefix(pl.o.Target, "v")
	if pin := pl.pinned[po.key()]; moveImage || pin {
		name := newTemplateName(po.amt.Name, pl.o.target)
		amt := &infrav1.AzureMachineTemplate{}
		amt.SetGroupVersionKind(infrav1.GroupVersion.WithKind("AzureMachineTemplate"))
		amt.Name, amt.Namespace, amt.Labels = name, po.amt.Namespace, po.amt.Labels
		amt.Spec = *po.amt.Spec.DeepCopy()
		if moveImage {
			amt.Spec.Template.Spec.Image.ComputeGallery.Version = strings.TrimPrefix(pl.o.Target, "v")
		}
		if pin {
			amt.Spec.Template.Spec.WindowsServerVersion = st.Windows
		}
		st.NewTemplate = name
		st.templates = append(st.templates, amt)
		spec += "      infrastructure:\n        name: " + name + "\n"
		doc, err := yamlOf(amt)
		if err != nil {
			return st, err
		}
		st.Manifest = doc
	}
	if po.kct != nil {
		if fs := removedKubeletArgs(&po.kct.Spec.Template.Spec, pl.o.Target); len(fs) > 0 {
			if err := st.newBootstrap(withoutKubeletArgs(po.kct, newTemplateName(po.kct.Name, pl.o.target), fs), &spec); err != nil {
				return st, err
			}
		}
	}
	st.Manifest += patchDoc("MachineDeployment", clusterv1.GroupVersion.String(), md.Namespace, md.Name, strings.Replace(spec, "infrastructure:", "infrastructureRef:", 1))
	return st, nil
}

// newBootstrap adds a pool's new bootstrap config (or template) to its
// step, and the pool's configRef to it to the pool's patch spec.
func (st *Step) newBootstrap(obj client.Object, spec *string) error {
	st.NewBootstrapTemplate = obj.GetName()
	st.templates = append(st.templates, obj)
	*spec += "      bootstrap:\n        configRef:\n          name: " + obj.GetName() + "\n"
	doc, err := yamlOf(obj)
	st.Manifest += doc
	return err
}

// mpStep: a MachinePool's version; its AzureMachinePool's community-gallery
// image moves with it, and an unpinned Windows release is pinned (the
// pool's own object, changed in place).
func (pl *planner) mpStep(po pool) (Step, error) {
	mp := po.mp
	st := Step{Kind: "MachinePool", Name: mp.Name, OS: osName(po.windows()), From: po.version, obj: mp, Windows: pl.release[po.key()]}
	amp, change := po.amp.DeepCopy(), ""
	if po.vm.Image != nil && galleryVersioned(po.vm.Image) {
		amp.Spec.Template.Image.ComputeGallery.Version = strings.TrimPrefix(pl.o.Target, "v")
		change += "    image:\n      computeGallery:\n        version: \"" + amp.Spec.Template.Image.ComputeGallery.Version + "\"\n"
	}
	if pl.pinned[po.key()] {
		amp.Spec.Template.WindowsServerVersion = st.Windows
		change += "    windowsServerVersion: \"" + string(st.Windows) + "\"\n"
	}
	if change != "" {
		st.templates = append(st.templates, amp)
		st.Manifest = patchDoc("AzureMachinePool", infrav1.GroupVersion.String(), amp.Namespace, amp.Name, "  template:\n"+change)
	}
	spec := "  template:\n    spec:\n      version: " + pl.o.Target + "\n"
	if po.kc != nil {
		if fs := removedKubeletArgs(&po.kc.Spec, pl.o.Target); len(fs) > 0 {
			if err := st.newBootstrap(configWithoutKubeletArgs(po.kc, newTemplateName(po.kc.Name, pl.o.target), fs), &spec); err != nil {
				return st, err
			}
		}
	}
	st.Manifest += patchDoc("MachinePool", clusterv1.GroupVersion.String(), mp.Namespace, mp.Name, spec)
	return st, nil
}

// newTemplateName is the template's name with its version replaced, or the
// target's appended ("-v1-36-3").
func newTemplateName(old string, t images.Version) string {
	tag := strings.ReplaceAll(t.String(), ".", "-")
	suffix := "-" + tag
	if i := strings.LastIndex(old, "-v1-"); i > 0 {
		old = old[:i]
	}
	if len(old)+len(suffix) > 63 {
		old = strings.TrimRight(old[:63-len(suffix)], "-.")
	}
	return old + suffix
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
