package workload

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/winkube/winkube/internal/images"
)

const (
	// WindowsBuildLabel is the label a Windows kubelet sets to its build.
	WindowsBuildLabel = "node.kubernetes.io/windows-build"
	build2019         = "10.0.17763"
	build2022         = "10.0.20348"
	build2025         = "10.0.26100"
)

// hostsFor lists the host builds that run an image of a Windows build:
// process isolation needs the same build, except that Windows Server 2025
// hosts also run 2022 images.
func hostsFor(imageBuild string) []string { return images.HostsRunning(imageBuild) }

// Placement is what the images of a pod say about where it can run.
type Placement struct {
	// OS is "windows" or "linux" when every image runs only there, "" when
	// any OS will do (multi-OS images).
	OS string
	// Builds are the Windows host builds that run every Windows image;
	// none when any build does (HostProcess, images naming no build).
	Builds []string
	// Unresolved are images whose platforms could not be read, with why.
	Unresolved []string
}

// Place resolves a pod's images and works out where it can run. It refuses
// pods whose images cannot share a node.
func Place(ctx context.Context, r *Resolver, spec *corev1.PodSpec, path *field.Path) (Placement, *field.Error) {
	var pl Placement
	var windowsOnly, linuxOnly []string
	// builds stays nil while no image asks for a build. A HostProcess
	// container runs on the host, not in a silo of the image's build
	// (the kubelet's pull checks only that it is a Windows image), and an
	// image whose Windows platform names no os.version (the HostProcess
	// base image) runs on any Windows host.
	var builds map[string]bool
	hostProcess := IsHostProcess(spec)
	for _, c := range containersOf(spec) {
		plats, err := r.Platforms(ctx, c.image)
		if err != nil {
			pl.Unresolved = append(pl.Unresolved, err.Error())
			continue
		}
		oses := map[string]bool{}
		imageHosts := map[string]bool{}
		anyBuild := hostProcess
		for _, p := range plats {
			oses[p.OS] = true
			if p.OS == "windows" {
				if p.WindowsBuild() == "" {
					anyBuild = true
				}
				for _, h := range hostsFor(p.WindowsBuild()) {
					imageHosts[h] = true
				}
			}
		}
		switch {
		case oses["windows"] && !oses["linux"]:
			windowsOnly = append(windowsOnly, c.image)
			if anyBuild {
				break
			}
			if builds == nil {
				builds = imageHosts
			} else {
				for h := range builds {
					if !imageHosts[h] {
						delete(builds, h)
					}
				}
			}
		case oses["linux"] && !oses["windows"]:
			linuxOnly = append(linuxOnly, c.image)
		}
	}
	if len(windowsOnly) > 0 && len(linuxOnly) > 0 {
		return pl, field.Invalid(path.Child("containers"), strings.Join(append(windowsOnly, linuxOnly...), ", "),
			fmt.Sprintf("images %s run only on Windows and %s only on Linux: a pod's containers share one node, so split them into separate pods", strings.Join(windowsOnly, ", "), strings.Join(linuxOnly, ", ")))
	}
	if len(windowsOnly) > 0 {
		pl.OS = "windows"
		for h := range builds {
			pl.Builds = append(pl.Builds, h)
		}
		sort.Strings(pl.Builds)
		if builds != nil && len(pl.Builds) == 0 {
			return pl, field.Invalid(path.Child("containers"), strings.Join(windowsOnly, ", "),
				"no Windows build runs all of these images (a host runs images of its own build; 2025 hosts also run 2022 images): use images of one Windows release")
		}
	} else if len(linuxOnly) > 0 {
		pl.OS = "linux"
	}
	return pl, nil
}

type container struct {
	image string
	path  *field.Path
}

func containersOf(spec *corev1.PodSpec) []container {
	var out []container
	for i, c := range spec.InitContainers {
		out = append(out, container{c.Image, field.NewPath("initContainers").Index(i)})
	}
	for i, c := range spec.Containers {
		out = append(out, container{c.Image, field.NewPath("containers").Index(i)})
	}
	return out
}

// BuildsAnnotation marks, on a pod or on a workload's pod template, the
// windows-build expression of the required node affinity that admission
// wrote itself: its value is the expression's values, comma-separated. An
// expression with other values, or one on an object without the mark, is
// the user's, and admission never changes it.
const BuildsAnnotation = "winkube.dev/windows-builds"

// Apply writes a placement into a pod spec without overriding what the user
// set: a nodeSelector or os.name that contradicts the images is refused.
// The windows-build affinity admission wrote earlier (marked in meta's
// annotations) is written anew from the images as they are now: a
// Deployment whose image moved from ltsc2019 to ltsc2022 must not keep
// requiring 2019 hosts. With images it could not read (pl.Unresolved) it
// leaves the pod as it was.
func Apply(pl Placement, meta *metav1.ObjectMeta, spec *corev1.PodSpec, path *field.Path, windowsTaint bool) (changed bool, ferr *field.Error) {
	if len(pl.Unresolved) > 0 {
		return false, nil
	}
	changed = forgetBuildAffinity(meta, spec)
	if pl.OS == "" {
		return changed, nil
	}
	if sel, ok := spec.NodeSelector[corev1.LabelOSStable]; ok && sel != pl.OS {
		return false, field.Invalid(path.Child("nodeSelector").Key(corev1.LabelOSStable), sel,
			fmt.Sprintf("every image of the pod runs only on %s: select %s nodes, or use images for %s", pl.OS, pl.OS, sel))
	}
	if spec.OS != nil && string(spec.OS.Name) != pl.OS {
		return false, field.Invalid(path.Child("os", "name"), spec.OS.Name, fmt.Sprintf("every image of the pod runs only on %s", pl.OS))
	}
	if b, ok := spec.NodeSelector[WindowsBuildLabel]; ok && pl.OS == "windows" && len(pl.Builds) > 0 && !contains(pl.Builds, b) {
		return false, field.Invalid(path.Child("nodeSelector").Key(WindowsBuildLabel), b,
			fmt.Sprintf("the pod's images run on Windows builds %s only (\"The container operating system does not match the host operating system\" otherwise)", strings.Join(pl.Builds, ", ")))
	}
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	if _, ok := spec.NodeSelector[corev1.LabelOSStable]; !ok {
		spec.NodeSelector[corev1.LabelOSStable] = pl.OS
		changed = true
	}
	if pl.OS != "windows" {
		return changed, nil
	}
	if spec.OS == nil {
		spec.OS = &corev1.PodOS{Name: corev1.Windows}
		changed = true
	}
	if _, ok := spec.NodeSelector[WindowsBuildLabel]; !ok && len(pl.Builds) > 0 && !hasBuildAffinity(spec) {
		addBuildAffinity(spec, pl.Builds)
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		meta.Annotations[BuildsAnnotation] = strings.Join(pl.Builds, ",")
		changed = true
	}
	if windowsTaint && !tolerates(spec) {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: "os", Operator: corev1.TolerationOpEqual, Value: "windows", Effect: corev1.TaintEffectNoSchedule})
		changed = true
	}
	return changed, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func hasBuildAffinity(spec *corev1.PodSpec) bool {
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == WindowsBuildLabel {
				return true
			}
		}
	}
	return false
}

// addBuildAffinity requires one of the builds; required terms are ORed, so
// the expression joins every existing term.
func addBuildAffinity(spec *corev1.PodSpec, builds []string) {
	expr := corev1.NodeSelectorRequirement{Key: WindowsBuildLabel, Operator: corev1.NodeSelectorOpIn, Values: builds}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	req := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) == 0 {
		spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{expr}}}}
		return
	}
	for i := range req.NodeSelectorTerms {
		req.NodeSelectorTerms[i].MatchExpressions = append(req.NodeSelectorTerms[i].MatchExpressions, expr)
	}
}

// WroteBuildAffinity reports whether the windows-build expression of a pod
// spec's required node affinity is the one admission wrote (marks are the
// pod's or its template's annotations).
func WroteBuildAffinity(marks map[string]string, spec *corev1.PodSpec) bool {
	mark, ok := marks[BuildsAnnotation]
	return ok && len(RequiredValues(spec, WindowsBuildLabel)) > 0 && strings.Join(RequiredValues(spec, WindowsBuildLabel), ",") == mark
}

// forgetBuildAffinity takes out of a pod spec the windows-build expression
// admission wrote (the one whose values the mark names), with the terms
// and the affinity it leaves empty, and the mark.
func forgetBuildAffinity(meta *metav1.ObjectMeta, spec *corev1.PodSpec) bool {
	mark, ok := meta.Annotations[BuildsAnnotation]
	if !ok {
		return false
	}
	delete(meta.Annotations, BuildsAnnotation)
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	req := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	var terms []corev1.NodeSelectorTerm
	for _, t := range req.NodeSelectorTerms {
		var kept []corev1.NodeSelectorRequirement
		for _, e := range t.MatchExpressions {
			if e.Key == WindowsBuildLabel && e.Operator == corev1.NodeSelectorOpIn && strings.Join(e.Values, ",") == mark {
				continue
			}
			kept = append(kept, e)
		}
		t.MatchExpressions = kept
		// An empty term matches no node: it held only admission's expression.
		if len(t.MatchExpressions) > 0 || len(t.MatchFields) > 0 {
			terms = append(terms, t)
		}
	}
	req.NodeSelectorTerms = terms
	na := spec.Affinity.NodeAffinity
	if len(terms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = nil
	}
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(na.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		spec.Affinity.NodeAffinity = nil
	}
	if spec.Affinity.NodeAffinity == nil && spec.Affinity.PodAffinity == nil && spec.Affinity.PodAntiAffinity == nil {
		spec.Affinity = nil
	}
	return true
}

func tolerates(spec *corev1.PodSpec) bool {
	for _, t := range spec.Tolerations {
		if t.Operator == corev1.TolerationOpExists && t.Key == "" || t.Key == "os" {
			return true
		}
	}
	return false
}
