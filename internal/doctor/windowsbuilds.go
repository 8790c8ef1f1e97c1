package doctor

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// pinnedBuilds are the Windows builds a template is tied to: its
// windows-build nodeSelector, or the builds its required node affinity
// allows (winkube admission writes it from the images); nil when untied.
func pinnedBuilds(spec *corev1.PodSpec) []string {
	if b := spec.NodeSelector[workload.WindowsBuildLabel]; b != "" {
		return []string{b}
	}
	return workload.RequiredValues(spec, workload.WindowsBuildLabel)
}

// leavingBuilds are the Windows builds the cluster is moving off: a build
// whose nodes are all cordoned (being drained) while another build has
// schedulable nodes, or an older build beside a newer one (a new pool was
// added beside the old).
func (s *State) leavingBuilds() map[string]string {
	type count struct{ all, cordoned int }
	builds := map[string]*count{}
	for _, n := range s.windowsNodes() {
		b := n.Labels[workload.WindowsBuildLabel]
		if b == "" {
			continue
		}
		if builds[b] == nil {
			builds[b] = &count{}
		}
		builds[b].all++
		if n.Spec.Unschedulable {
			builds[b].cordoned++
		}
	}
	newest := ""
	for b := range builds {
		if b > newest {
			newest = b
		}
	}
	out := map[string]string{}
	for b, c := range builds {
		switch {
		case b != newest:
			out[b] = fmt.Sprintf("the cluster has nodes of %s beside them", describeBuild(newest))
		case c.cordoned == c.all && len(builds) > 1:
			out[b] = "all its nodes are cordoned"
		}
	}
	return out
}

func describeBuild(b string) string {
	if r := images.WindowsRelease(b); r != "" {
		return b + " (Windows Server " + string(r) + ")"
	}
	return b
}

// WindowsBuildPins reports workloads tied to Windows builds the cluster is
// leaving, or that the platform no longer supports for the cluster's
// Kubernetes version (AKS's windows, images.WindowsSupport): when those
// nodes go, their pods stay Pending.
func WindowsBuildPins(s *State) []Finding {
	leaving := s.leavingBuilds()
	var out []Finding
	type pinned struct {
		kind, namespace, name string
		spec                  *corev1.PodSpec
	}
	var all []pinned
	for _, t := range s.templates() {
		all = append(all, pinned{t.kind, t.meta.Namespace, t.meta.Name, t.spec})
	}
	for i := range s.Pods {
		p := &s.Pods[i]
		if len(p.OwnerReferences) == 0 {
			all = append(all, pinned{"Pod", p.Namespace, p.Name, &p.Spec})
		}
	}
	for _, w := range all {
		builds := pinnedBuilds(w.spec)
		if len(builds) == 0 {
			continue
		}
		var why []string
		ok := false
		for _, b := range builds {
			reason, going := leaving[b]
			supported, unsupported := true, ""
			if s.Version != (images.Version{}) {
				supported, unsupported = images.WindowsSupported(images.WindowsRelease(b), s.Version)
			}
			switch {
			case going:
				why = append(why, fmt.Sprintf("%s is being left (%s)", describeBuild(b), reason))
			case !supported:
				why = append(why, unsupported)
			default:
				ok = true
			}
		}
		if ok || len(why) == 0 {
			continue // one of its builds stays
		}
		sort.Strings(why)
		out = append(out, Finding{Check: "windows-build-pins", Severity: Warning, Object: ref(w.kind, w.namespace, w.name),
			Message: fmt.Sprintf("%s %s/%s runs only on Windows build %s: %s", w.kind, w.namespace, w.name, strings.Join(builds, ", "), strings.Join(why, "; ")),
			Fix:     "move it before its nodes go: 'winkube plan windows-upgrade --to 2022' (or 2025) names the image tag that runs on the new nodes; change the image (winkube admission writes anew the windows-build affinity it wrote, the one its annotation winkube.dev/windows-builds names) and drop a windows-build selector or affinity of your own"})
	}
	return out
}
