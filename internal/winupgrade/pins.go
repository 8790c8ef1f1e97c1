package winupgrade

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// pins reports what ties a workload to the nodes the cluster leaves:
// its windows-build selector or affinity, node names, labels only the old
// nodes carry, and tolerations of taints named after the old release.
func (pl *planner) pins(w workloadRef) {
	spec := w.spec
	var why []string
	fix := "remove it: winkube admission places each pod on the builds its images run on"
	if b, ok := spec.NodeSelector[workload.WindowsBuildLabel]; ok && b != pl.p.TargetBuild {
		why = append(why, fmt.Sprintf("nodeSelector %s: %s", workload.WindowsBuildLabel, b))
	}
	if builds := requiredValues(spec, workload.WindowsBuildLabel); builds != nil && !contains(builds, pl.p.TargetBuild) {
		why = append(why, fmt.Sprintf("a required node affinity on %s allows only %s", workload.WindowsBuildLabel, strings.Join(builds, ", ")))
		fix = fmt.Sprintf("remove the %s expression with the image change (winkube admission writes it anew from the new image)", workload.WindowsBuildLabel)
		if workload.WroteBuildAffinity(w.marks, spec) {
			fix = fmt.Sprintf("change the image: the %s expression is winkube admission's (annotation %s), which it writes anew from the new image", workload.WindowsBuildLabel, workload.BuildsAnnotation)
		}
	}
	if name := spec.NodeName; name != "" && pl.leavingNode(name) {
		why = append(why, "spec.nodeName "+name+", a node that goes")
		fix = "recreate the pod without spec.nodeName"
	}
	for _, key := range []string{corev1.LabelHostname} {
		vals := append(requiredValues(spec, key), spec.NodeSelector[key])
		for _, v := range vals {
			if v != "" && pl.leavingNode(v) {
				why = append(why, fmt.Sprintf("%s %s, a node that goes", key, v))
			}
		}
	}
	if len(why) > 0 {
		pl.add(Finding{Check: CheckPins, Severity: doctor.Error, Object: w.String(),
			Message: fmt.Sprintf("%s is pinned to the nodes being replaced: %s", w, strings.Join(why, "; ")), Fix: fix})
	}
	// Labels only the old nodes carry (pool labels).
	for k, v := range spec.NodeSelector {
		switch k {
		case corev1.LabelOSStable, corev1.LabelArchStable, workload.WindowsBuildLabel, corev1.LabelHostname:
			continue
		}
		var old, current int
		for i := range pl.s.nodes {
			n := &pl.s.nodes[i]
			if n.Labels[corev1.LabelOSStable] != "windows" || n.Labels[k] != v {
				continue
			}
			if pl.leavingNode(n.Name) {
				old++
			} else {
				current++
			}
		}
		if old == 0 || current > 0 {
			continue
		}
		sev := doctor.Warning
		if pl.oldMarker(v) {
			sev = doctor.Error
		}
		pl.add(Finding{Check: CheckPins, Severity: sev, Object: w.String(),
			Message: fmt.Sprintf("%s selects nodes labelled %s=%s, which only the nodes being replaced carry", w, k, v),
			Fix:     fmt.Sprintf("label the new pool's nodes %s=%s (its KubeadmConfigTemplate's kubelet node-labels) or drop the selector", k, v)})
	}
	for _, t := range spec.Tolerations {
		if pl.oldMarker(t.Key) || pl.oldMarker(t.Value) {
			pl.add(Finding{Check: CheckPins, Severity: doctor.Warning, Object: w.String(),
				Message: fmt.Sprintf("%s tolerates %s=%s, a taint named after the release being left: the new pool's nodes will carry another", w, t.Key, t.Value),
				Fix:     "tolerate the new pool's taint as well, before draining"})
		}
	}
}

var requiredValues = workload.RequiredValues

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// disruptionBudgets reports the budgets that will hold up the drain of
// the old nodes: they allow no disruption now, and cover pods there.
func (pl *planner) disruptionBudgets() {
	for i := range pl.s.pdbs {
		b := &pl.s.pdbs[i]
		sel, err := metaSelector(b)
		if err != nil {
			continue
		}
		var onOld []string
		for j := range pl.s.pods {
			p := &pl.s.pods[j]
			if p.Namespace == b.Namespace && sel.Matches(labels.Set(p.Labels)) && pl.leavingNode(p.Spec.NodeName) {
				onOld = append(onOld, p.Name)
			}
		}
		if len(onOld) == 0 || b.Status.DisruptionsAllowed > 0 {
			continue
		}
		sort.Strings(onOld)
		pl.add(Finding{Check: CheckPDBs, Severity: doctor.Error, Object: "PodDisruptionBudget/" + b.Namespace + "/" + b.Name,
			Message: fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption now (%d of %d pods healthy, %d desired) and covers pods on the nodes being replaced (%s): draining them will wait on it",
				b.Namespace, b.Name, b.Status.CurrentHealthy, b.Status.ExpectedPods, b.Status.DesiredHealthy, strings.Join(onOld, ", ")),
			Fix: "scale the workload up by one, or make its images run on the new nodes first, so a pod can move while the budget holds; or relax minAvailable/maxUnavailable for the move"})
	}
}

// services reports Services whose Windows backends change behaviour on
// the new release: kube-proxy on Windows Server 2019 ignores ClientIP
// session affinity, which 2022 and later apply (without timeoutSeconds);
// kubernetes.io "Windows in Kubernetes" networking limitations, as
// DESIGN.md records them.
func (pl *planner) services() {
	for i := range pl.s.services {
		svc := &pl.s.services[i]
		if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP || len(svc.Spec.Selector) == 0 {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		old := false
		for j := range pl.s.pods {
			p := &pl.s.pods[j]
			if p.Namespace == svc.Namespace && sel.Matches(labels.Set(p.Labels)) && nodeBuild(pl, p.Spec.NodeName) == images.WindowsBuild[infrav1.WindowsServer2019] {
				old = true
				break
			}
		}
		if !old {
			continue
		}
		pl.add(Finding{Check: CheckServices, Severity: doctor.Warning, Object: "Service/" + svc.Namespace + "/" + svc.Name,
			Message: fmt.Sprintf("Service %s/%s sets sessionAffinity ClientIP and has backends on Windows Server 2019 nodes, whose kube-proxy ignores it: on Windows Server %s it applies, so clients stick to one backend (and sessionAffinityConfig.clientIP.timeoutSeconds is ignored)", svc.Namespace, svc.Name, pl.o.Target),
			Fix:     "if the application relied on requests spreading, set sessionAffinity: None before the move"})
	}
}

func nodeBuild(pl *planner, name string) string {
	for i := range pl.s.nodes {
		if pl.s.nodes[i].Name == name {
			return build(&pl.s.nodes[i])
		}
	}
	return ""
}

func metaSelector(b *policyv1.PodDisruptionBudget) (labels.Selector, error) {
	if b.Spec.Selector == nil {
		return labels.Nothing(), nil
	}
	return metav1.LabelSelectorAsSelector(b.Spec.Selector)
}
