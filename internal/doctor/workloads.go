package doctor

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util"

	"github.com/winkube/winkube/internal/webhooks/workload"
	"github.com/winkube/winkube/windowslimits"
)

const betaOSLabel = "beta.kubernetes.io/os"

// selectedOS is the OS a pod template is pinned to ("" when none): by
// spec.os, nodeSelector, or a required node affinity on the OS label that
// every term carries.
func selectedOS(spec *corev1.PodSpec) string {
	if spec.OS != nil {
		return string(spec.OS.Name)
	}
	for _, k := range []string{corev1.LabelOSStable, betaOSLabel} {
		if os := spec.NodeSelector[k]; os != "" {
			return os
		}
	}
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	os := ""
	for _, t := range terms {
		found := ""
		for _, e := range t.MatchExpressions {
			if e.Key != corev1.LabelOSStable && e.Key != betaOSLabel {
				continue
			}
			switch {
			case e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1:
				found = e.Values[0]
			case e.Operator == corev1.NodeSelectorOpNotIn && len(e.Values) == 1 && e.Values[0] == "windows":
				found = "linux"
			case e.Operator == corev1.NodeSelectorOpNotIn && len(e.Values) == 1 && e.Values[0] == "linux":
				found = "windows"
			}
		}
		if found == "" || os != "" && found != os {
			return ""
		}
		os = found
	}
	return os
}

// fits reports whether a pod of spec can be placed on n as far as taints and
// the nodeSelector go (the checks that matter for an OS without selection).
func fits(spec *corev1.PodSpec, n *corev1.Node) bool {
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(n.Labels)) {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for _, tol := range spec.Tolerations {
			if toleratesTaint(tol, t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return false
		}
	}
	return true
}

// landsOnWindows returns the Windows nodes a template without OS selection
// can be placed on.
func (s *State) landsOnWindows(spec *corev1.PodSpec) []string {
	var out []string
	for name, n := range s.windowsNodes() {
		if os := selectedOS(spec); os != "" && os != "windows" {
			return nil
		}
		if fits(spec, n) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

type template struct {
	kind string
	meta metav1.ObjectMeta
	spec *corev1.PodSpec
}

func (s *State) templates() []template {
	var out []template
	for i := range s.Deployments {
		out = append(out, template{"Deployment", s.Deployments[i].ObjectMeta, &s.Deployments[i].Spec.Template.Spec})
	}
	for i := range s.StatefulSets {
		out = append(out, template{"StatefulSet", s.StatefulSets[i].ObjectMeta, &s.StatefulSets[i].Spec.Template.Spec})
	}
	for i := range s.DaemonSets {
		out = append(out, template{"DaemonSet", s.DaemonSets[i].ObjectMeta, &s.DaemonSets[i].Spec.Template.Spec})
	}
	return out
}

// UnselectedWorkloads reports Deployments, StatefulSets and DaemonSets that
// pick no OS in a cluster with Windows nodes, where their pods can land.
func UnselectedWorkloads(s *State) []Finding {
	var out []Finding
	for _, t := range s.templates() {
		if selectedOS(t.spec) != "" {
			continue
		}
		nodes := s.landsOnWindows(t.spec)
		if len(nodes) == 0 {
			continue
		}
		out = append(out, Finding{Check: "os-selection", Severity: Warning, Object: ref(t.kind, t.meta.Namespace, t.meta.Name),
			Message: fmt.Sprintf("%s %s/%s selects no operating system, so its pods can land on Windows nodes (%s), where a Linux image fails", t.kind, t.meta.Namespace, t.meta.Name, strings.Join(nodes, ", ")),
			Fix:     "set spec.template.spec.nodeSelector kubernetes.io/os: linux (or windows) and spec.template.spec.os.name; winkube admission sets both from the images"})
	}
	return out
}

// DaemonSetsOnWindows reports DaemonSets that place pods on Windows nodes
// but cannot run there: their template asks for what Windows does not have,
// or their pods on Windows nodes do not become ready.
func DaemonSetsOnWindows(s *State) []Finding {
	win := s.windowsNodes()
	var out []Finding
	for i := range s.DaemonSets {
		ds := &s.DaemonSets[i]
		nodes := s.landsOnWindows(&ds.Spec.Template.Spec)
		if len(nodes) == 0 {
			continue
		}
		spec := ds.Spec.Template.Spec.DeepCopy()
		// A HostProcess template that names no OS runs as it is: its
		// containers are host processes, and the Windows kubelet drops
		// the Linux-only settings it carries (the Azure Disk CSI chart's
		// capabilities drop: ALL). Only os.name windows would have the
		// API server refuse them.
		ignored := spec.OS == nil && workload.IsHostProcess(spec)
		spec.OS = &corev1.PodOS{Name: corev1.Windows}
		errs, _ := workload.ValidateWindows(spec, field.NewPath("spec", "template", "spec"))
		if len(errs) > 0 && !ignored {
			out = append(out, Finding{Check: "daemonsets-on-windows", Severity: Error, Object: ref("DaemonSet", ds.Namespace, ds.Name),
				Message: fmt.Sprintf("DaemonSet %s/%s places pods on Windows nodes (%s) but cannot run there: %s", ds.Namespace, ds.Name, strings.Join(nodes, ", "), errs.ToAggregate().Error()),
				Fix:     "restrict it to Linux with spec.template.spec.nodeSelector kubernetes.io/os: linux, and deploy a Windows variant (a HostProcess DaemonSet) if Windows nodes need it"})
			continue
		}
		var failing []string
		for j := range s.Pods {
			p := &s.Pods[j]
			if win[p.Spec.NodeName] == nil || !util.IsOwnedByObject(p, ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet").GroupKind()) || p.Namespace != ds.Namespace || podReady(p) {
				continue
			}
			failing = append(failing, fmt.Sprintf("%s on %s (%s)", p.Name, p.Spec.NodeName, notReadyReason(p)))
		}
		if len(failing) > 0 {
			sort.Strings(failing)
			out = append(out, Finding{Check: "daemonsets-on-windows", Severity: Error, Object: ref("DaemonSet", ds.Namespace, ds.Name),
				Message: fmt.Sprintf("DaemonSet %s/%s has pods on Windows nodes that are not ready: %s", ds.Namespace, ds.Name, strings.Join(failing, "; ")),
				Fix:     "if its images are Linux-only, restrict it with nodeSelector kubernetes.io/os: linux; otherwise use images built for the nodes' Windows builds"})
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// notReadyReason is the first container's waiting or termination reason,
// or the pod's phase.
func notReadyReason(p *corev1.Pod) string {
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			if w.Message != "" {
				return w.Reason + ": " + w.Message
			}
			return w.Reason
		}
		if t := cs.State.Terminated; t != nil && t.Reason != "" {
			return t.Reason
		}
	}
	if p.Status.Phase == "" {
		return "not started"
	}
	return string(p.Status.Phase)
}

// onWindows reports whether a pod runs, or is to run, on Windows.
func (s *State) onWindows(p *corev1.Pod) bool {
	if n := s.node(p.Spec.NodeName); n != nil {
		return isWindowsNode(n)
	}
	return workload.IsWindows(&p.Spec)
}

// SecretsOnWindows warns of Secrets mounted into Windows pods: the
// table's secret-on-disk row.
func SecretsOnWindows(s *State) []Finding {
	row := windowslimits.ByID(secretOnDisk)
	seen := map[string]bool{}
	var out []Finding
	for i := range s.Pods {
		p := &s.Pods[i]
		if !s.onWindows(p) {
			continue
		}
		hits := row.Match(windowslimits.PodTarget(p))
		if len(hits) == 0 {
			continue
		}
		kind, name := "Pod", p.Name
		if len(p.OwnerReferences) > 0 {
			kind, name = p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name
		}
		key := kind + "/" + p.Namespace + "/" + name
		if seen[key] {
			continue
		}
		seen[key] = true
		secrets := make([]string, 0, len(hits))
		for _, h := range hits {
			secrets = append(secrets, h.What)
		}
		out = append(out, Finding{Check: "secrets-on-windows", Severity: severityOf(row), Object: ref(kind, p.Namespace, name),
			Message: fmt.Sprintf("Windows pod %s/%s mounts Secret(s) %s: %s", p.Namespace, p.Name, strings.Join(secrets, ", "), row.Explain),
			Fix:     row.Fix})
	}
	return out
}

// toleratesTaint is the scheduler's rule: an empty key with Exists matches
// every taint, an empty effect every effect.
func toleratesTaint(tol corev1.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key == "" {
		return tol.Operator == corev1.TolerationOpExists
	}
	if tol.Key != t.Key {
		return false
	}
	return tol.Operator == corev1.TolerationOpExists || tol.Value == t.Value
}
