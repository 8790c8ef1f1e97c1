// Package winupgrade plans the move of a cluster's Windows nodes to a newer
// Windows Server release. No platform upgrades a Windows node's OS in place:
// a pool of the new release is created beside the old one and the workloads
// move to it. Process-isolated containers run only on a host of their own
// build (Windows Server 2025 hosts also run 2022 images), so the plan reads
// every Windows workload's images from their registries, says which would
// break on the new nodes and which tag of the same repository would not,
// finds what else pins a workload to the old nodes (selectors, affinities,
// tolerations, node names), the PodDisruptionBudgets that would block the
// drain, and Services whose behaviour changes; and it writes the new pools.
package winupgrade

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// Severities and findings are the doctor's, so that both commands print and
// exit alike.
type (
	Finding  = doctor.Finding
	Severity = doctor.Severity
)

// Check names of the plan's findings.
const (
	CheckImages   = "images"
	CheckPins     = "pinned-to-old-nodes"
	CheckPDBs     = "disruption-budgets"
	CheckServices = "services"
	CheckPools    = "pools"
	CheckSupport  = "platform-support"
)

// Options say what to plan.
type Options struct {
	// Workload reads the workload cluster.
	Workload client.Client
	// Management, when set, holds the cluster's MachineDeployments and
	// MachinePools, from which the new pools are written; Namespace and
	// ClusterName name the cluster there.
	Management  client.Client
	Namespace   string
	ClusterName string
	// Target is the Windows Server release to move to.
	Target infrav1.WindowsServerVersion
	// Version is the cluster's Kubernetes version (zero: not checked).
	Version images.Version
	// Resolver reads images' platforms and tags: the admission webhook's.
	Resolver *workload.Resolver
	// MaxTagLookups bounds the tags read to find an image's replacement;
	// 20 when zero.
	MaxTagLookups int
}

// Image is what one container's image offers and whether the target runs it.
type Image struct {
	Workload  string `json:"workload"`
	Container string `json:"container"`
	Image     string `json:"image"`
	// Builds are the Windows builds the image's manifest list offers
	// ("any" for a HostProcess image, which names none).
	Builds []string `json:"builds,omitempty"`
	// RunsOnTarget: a node of the target release runs it.
	RunsOnTarget bool `json:"runsOnTarget"`
	// Use is the tag of the same repository that runs on the target, when
	// the image does not and one exists.
	Use   string `json:"use,omitempty"`
	Error string `json:"error,omitempty"`
}

// Plan is the result.
type Plan struct {
	Target      infrav1.WindowsServerVersion `json:"target"`
	TargetBuild string                       `json:"targetBuild"`
	// Leaving are the Windows nodes not of the target build, by build.
	Leaving map[string][]string `json:"leaving"`
	Images  []Image             `json:"images"`
	Pools   []Pool              `json:"pools,omitempty"`
	// Findings are what to fix before (or while) moving.
	Findings []Finding `json:"findings"`
}

// ExitCode is the doctor's: 0 clean, 1 warnings, 2 errors.
func (p *Plan) ExitCode() int { return doctor.Report{Findings: p.Findings}.ExitCode() }

// workloadRef is a workload with a pod template (or a bare pod).
type workloadRef struct {
	kind, namespace, name string
	spec                  *corev1.PodSpec
	// marks are the pod template's annotations (where admission marks the
	// windows-build affinity it wrote).
	marks map[string]string
	// selector chooses its pods (nil for a bare pod: the pod itself).
	selector labels.Selector
}

func (w workloadRef) String() string { return w.kind + "/" + w.namespace + "/" + w.name }

// Run plans the move.
func Run(ctx context.Context, o Options) (*Plan, error) {
	target := images.WindowsBuild[o.Target]
	if target == "" {
		return nil, fmt.Errorf("Windows Server %q is not a release winkube knows: use 2022 or 2025", o.Target)
	}
	if o.MaxTagLookups == 0 {
		o.MaxTagLookups = 20
	}
	s, err := load(ctx, o.Workload)
	if err != nil {
		return nil, err
	}
	p := &Plan{Target: o.Target, TargetBuild: target, Leaving: map[string][]string{}}
	pl := &planner{o: o, s: s, p: p, fixes: map[string]fixResult{}}
	for i := range s.nodes {
		n := &s.nodes[i]
		if n.Labels[corev1.LabelOSStable] != "windows" {
			continue
		}
		if b := build(n); b != target {
			p.Leaving[b] = append(p.Leaving[b], n.Name)
		}
	}
	pl.support()
	for _, w := range s.workloads() {
		pl.workload(ctx, w)
	}
	pl.disruptionBudgets()
	pl.services()
	if o.Management != nil {
		if err := pl.pools(ctx); err != nil {
			return nil, err
		}
	}
	doctor.SortFindings(p.Findings)
	return p, nil
}

// build is a node's Windows build (the label the kubelet sets, else its
// kernel version's first three parts).
func build(n *corev1.Node) string {
	if b := n.Labels[workload.WindowsBuildLabel]; b != "" {
		return b
	}
	return workload.Platform{OSVersion: n.Status.NodeInfo.KernelVersion}.WindowsBuild()
}

func describe(b string) string {
	if r := images.WindowsRelease(b); r != "" {
		return b + " (Windows Server " + string(r) + ")"
	}
	return b
}

type state struct {
	nodes        []corev1.Node
	pods         []corev1.Pod
	services     []corev1.Service
	pdbs         []policyv1.PodDisruptionBudget
	deployments  []appsv1.Deployment
	statefulSets []appsv1.StatefulSet
	daemonSets   []appsv1.DaemonSet
	jobs         []batchv1.Job
	cronJobs     []batchv1.CronJob
}

func load(ctx context.Context, c client.Client) (*state, error) {
	lists := []struct {
		what string
		list client.ObjectList
	}{
		{"nodes", &corev1.NodeList{}}, {"pods", &corev1.PodList{}}, {"services", &corev1.ServiceList{}},
		{"pod disruption budgets", &policyv1.PodDisruptionBudgetList{}}, {"deployments", &appsv1.DeploymentList{}},
		{"stateful sets", &appsv1.StatefulSetList{}}, {"daemon sets", &appsv1.DaemonSetList{}},
		{"jobs", &batchv1.JobList{}}, {"cron jobs", &batchv1.CronJobList{}},
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list); err != nil {
			return nil, fmt.Errorf("listing the workload cluster's %s: %w", l.what, err)
		}
	}
	return &state{
		nodes:        lists[0].list.(*corev1.NodeList).Items,
		pods:         lists[1].list.(*corev1.PodList).Items,
		services:     lists[2].list.(*corev1.ServiceList).Items,
		pdbs:         lists[3].list.(*policyv1.PodDisruptionBudgetList).Items,
		deployments:  lists[4].list.(*appsv1.DeploymentList).Items,
		statefulSets: lists[5].list.(*appsv1.StatefulSetList).Items,
		daemonSets:   lists[6].list.(*appsv1.DaemonSetList).Items,
		jobs:         lists[7].list.(*batchv1.JobList).Items,
		cronJobs:     lists[8].list.(*batchv1.CronJobList).Items,
	}, nil
}

// workloads are every object with a pod template, and the pods no
// controller owns; Jobs of a CronJob are the CronJob's.
func (s *state) workloads() []workloadRef {
	var out []workloadRef
	sel := func(ls *metav1.LabelSelector) labels.Selector {
		if ls == nil {
			return labels.Nothing()
		}
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			return labels.Nothing()
		}
		return s
	}
	for i := range s.deployments {
		d := &s.deployments[i]
		out = append(out, workloadRef{"Deployment", d.Namespace, d.Name, &d.Spec.Template.Spec, d.Spec.Template.Annotations, sel(d.Spec.Selector)})
	}
	for i := range s.statefulSets {
		d := &s.statefulSets[i]
		out = append(out, workloadRef{"StatefulSet", d.Namespace, d.Name, &d.Spec.Template.Spec, d.Spec.Template.Annotations, sel(d.Spec.Selector)})
	}
	for i := range s.daemonSets {
		d := &s.daemonSets[i]
		out = append(out, workloadRef{"DaemonSet", d.Namespace, d.Name, &d.Spec.Template.Spec, d.Spec.Template.Annotations, sel(d.Spec.Selector)})
	}
	for i := range s.cronJobs {
		c := &s.cronJobs[i]
		out = append(out, workloadRef{"CronJob", c.Namespace, c.Name, &c.Spec.JobTemplate.Spec.Template.Spec, c.Spec.JobTemplate.Spec.Template.Annotations, labels.Nothing()})
	}
	for i := range s.jobs {
		j := &s.jobs[i]
		if owner := metav1.GetControllerOf(j); owner != nil && owner.Kind == "CronJob" {
			continue
		}
		out = append(out, workloadRef{"Job", j.Namespace, j.Name, &j.Spec.Template.Spec, j.Spec.Template.Annotations, sel(j.Spec.Selector)})
	}
	for i := range s.pods {
		p := &s.pods[i]
		if metav1.GetControllerOf(p) != nil {
			continue
		}
		out = append(out, workloadRef{"Pod", p.Namespace, p.Name, &p.Spec, p.Annotations, labels.Nothing()})
	}
	return out
}

type planner struct {
	o     Options
	s     *state
	p     *Plan
	fixes map[string]fixResult
}

type fixResult struct {
	use string
	err error
}

func (pl *planner) add(f Finding) { pl.p.Findings = append(pl.p.Findings, f) }

func (pl *planner) leavingNode(name string) bool {
	for _, nodes := range pl.p.Leaving {
		for _, n := range nodes {
			if n == name {
				return true
			}
		}
	}
	return false
}

// support says when the target, or a release the cluster runs, is past
// the platform's support for the cluster's Kubernetes version.
func (pl *planner) support() {
	if pl.o.Version == (images.Version{}) {
		return
	}
	if ok, why := images.WindowsSupported(pl.o.Target, pl.o.Version); !ok {
		next := infrav1.WindowsServer2025
		pl.add(Finding{Check: CheckSupport, Severity: doctor.Error, Message: fmt.Sprintf("the cluster runs Kubernetes %s, and %s", pl.o.Version, why),
			Fix: fmt.Sprintf("move to Windows Server %s instead: --to %s", next, next)})
	}
	for b, nodes := range pl.p.Leaving {
		r := images.WindowsRelease(b)
		if ok, why := images.WindowsSupported(r, pl.o.Version); !ok {
			sort.Strings(nodes)
			pl.add(Finding{Check: CheckSupport, Severity: doctor.Warning, Object: "Nodes/" + strings.Join(nodes, ","),
				Message: fmt.Sprintf("nodes %s run build %s on Kubernetes %s: %s", strings.Join(nodes, ", "), describe(b), pl.o.Version, why)})
		}
	}
}

// windowsOS says whether a template runs on Windows: "windows", "linux",
// or "" when it does not choose.
func windowsOS(spec *corev1.PodSpec) string {
	if spec.OS != nil {
		return string(spec.OS.Name)
	}
	return spec.NodeSelector[corev1.LabelOSStable]
}

func hostProcess(spec *corev1.PodSpec) bool {
	sc := spec.SecurityContext
	return sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess
}

type container struct{ name, image string }

func containers(spec *corev1.PodSpec) []container {
	var out []container
	for _, c := range spec.InitContainers {
		out = append(out, container{c.Name, c.Image})
	}
	for _, c := range spec.Containers {
		out = append(out, container{c.Name, c.Image})
	}
	return out
}

// workload reads a workload's images and pins.
func (pl *planner) workload(ctx context.Context, w workloadRef) {
	os := windowsOS(w.spec)
	if os == "linux" {
		return
	}
	type resolved struct {
		c     container
		plats []workload.Platform
		err   error
	}
	var rs []resolved
	windows := os == "windows"
	for _, c := range containers(w.spec) {
		plats, err := pl.o.Resolver.Platforms(ctx, c.image)
		rs = append(rs, resolved{c, plats, err})
		if len(workload.WindowsBuilds(plats)) > 0 {
			windows = true
		}
	}
	if !windows {
		return // Linux images, or none readable for a template that does not choose Windows
	}
	hp := hostProcess(w.spec)
	for _, r := range rs {
		img := Image{Workload: w.String(), Container: r.c.name, Image: r.c.image}
		if r.err != nil {
			img.Error = r.err.Error()
			pl.p.Images = append(pl.p.Images, img)
			pl.add(Finding{Check: CheckImages, Severity: doctor.Warning, Object: w.String(),
				Message: fmt.Sprintf("cannot read the platforms of container %s's image: %v", r.c.name, r.err),
				Fix:     "make the registry reachable from here (--insecure-registry, --registry-mirror, or your registry credentials in ~/.docker/config.json) and plan again"})
			continue
		}
		img.Builds = workload.WindowsBuilds(r.plats)
		img.RunsOnTarget = hp || workload.RunsOn(r.plats, pl.p.TargetBuild)
		if len(img.Builds) == 0 {
			// A Linux-only image in a Windows template: the doctor's
			// platform-mismatch finding, not the move's.
			continue
		}
		if !img.RunsOnTarget {
			fix := pl.fix(ctx, r.c.image)
			img.Use = fix.use
			f := Finding{Check: CheckImages, Severity: doctor.Error, Object: w.String(),
				Message: fmt.Sprintf("container %s's image %s offers Windows %s only: Windows Server %s nodes (%s) cannot run it (\"The container operating system does not match the host operating system\")",
					r.c.name, r.c.image, describeAll(img.Builds), pl.o.Target, pl.p.TargetBuild)}
			switch {
			case fix.use != "":
				f.Fix = fmt.Sprintf("use %s, which runs on Windows Server %s, once the new nodes are Ready", fix.use, pl.o.Target)
			case fix.err != nil:
				f.Fix = fmt.Sprintf("build the image for Windows Server %s (FROM a ltsc%s base) and publish it in a manifest list beside the current build (looking for another tag failed: %v)", pl.o.Target, pl.o.Target, fix.err)
			default:
				f.Fix = fmt.Sprintf("no tag of the repository runs on Windows Server %s: build the image FROM a ltsc%s base and publish it in a manifest list beside the current build, so one tag runs on both pools during the move", pl.o.Target, pl.o.Target)
			}
			pl.add(f)
		}
		pl.p.Images = append(pl.p.Images, img)
	}
	pl.pins(w)
}

func describeAll(builds []string) string {
	out := make([]string, len(builds))
	for i, b := range builds {
		out[i] = describe(b)
	}
	return strings.Join(out, ", ")
}
