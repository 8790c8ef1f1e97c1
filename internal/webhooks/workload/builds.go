package workload

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// MissingBuildReason is the reason of the event on a pod that waits for a
// Windows build no node of the cluster has.
const MissingBuildReason = "NoWindowsNodeOfBuild"

var releaseOf = map[string]string{build2019: "2019", build2022: "2022", build2025: "2025"}

// BuildReporter explains pods that placement sent to a Windows build the
// cluster has no node of: the scheduler only says that no node matched
// the affinity, not which build the image needs nor how to get one.
type BuildReporter struct {
	Client client.Client
}

// SetupWithManager watches pods that are not yet scheduled.
func (r *BuildReporter) SetupWithManager(mgr ctrl.Manager) error {
	unscheduled := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Spec.NodeName == "" && len(requiredBuilds(&p.Spec)) > 0
	})
	// One process may serve several clusters' admission (the local world):
	// the name repeats across their managers.
	return ctrl.NewControllerManagedBy(mgr).Named("windows-build-reporter").For(&corev1.Pod{}).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		WithEventFilter(predicate.And(unscheduled, predicate.Funcs{DeleteFunc: func(event.DeleteEvent) bool { return false }})).
		Complete(r)
}

// Reconcile records an event on the pod when no Windows node has one of
// the builds its affinity requires.
func (r *BuildReporter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	need := requiredBuilds(&pod.Spec)
	if pod.Spec.NodeName != "" || len(need) == 0 {
		return ctrl.Result{}, nil
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes, client.MatchingLabels{corev1.LabelOSStable: "windows"}); err != nil {
		return ctrl.Result{}, err
	}
	have := map[string]bool{}
	for _, n := range nodes.Items {
		if b := n.Labels[WindowsBuildLabel]; b != "" {
			have[b] = true
		}
	}
	for _, b := range need {
		if have[b] {
			return ctrl.Result{}, nil // the scheduler will find it a node
		}
	}
	return ctrl.Result{}, r.record(ctx, pod, missingBuildMessage(pod, need, have))
}

func missingBuildMessage(pod *corev1.Pod, need []string, have map[string]bool) string {
	var images []string
	for _, c := range pod.Spec.Containers {
		images = append(images, c.Image)
	}
	wanted := make([]string, 0, len(need))
	for _, b := range need {
		wanted = append(wanted, describeBuild(b))
	}
	var got []string
	for b := range have {
		got = append(got, describeBuild(b))
	}
	sort.Strings(got)
	cluster := "this cluster has no Windows nodes"
	if len(got) > 0 {
		cluster = "this cluster's Windows nodes are " + strings.Join(got, ", ")
	}
	// The build the image is for, and the tag for the builds there are.
	first := releaseOf[need[0]]
	var tags []string
	for _, b := range []string{build2019, build2022, build2025} {
		if have[b] {
			tags = append(tags, "ltsc"+releaseOf[b])
		}
	}
	fix := fmt.Sprintf("add Windows Server %s nodes ('winkube up --windows-version %s' for a local cluster, or a MachineDeployment whose AzureMachineTemplate sets windowsServerVersion: \"%s\")", first, first, first)
	if len(tags) > 0 {
		fix += ", or use the image's " + strings.Join(tags, " or ") + " tag"
	}
	return fmt.Sprintf("image %s runs on Windows %s only (process isolation needs the host's build); %s: %s",
		strings.Join(images, ", "), strings.Join(wanted, " or "), cluster, fix)
}

func describeBuild(b string) string {
	if r, ok := releaseOf[b]; ok {
		return b + " (Windows Server " + r + ")"
	}
	return b
}

// record writes one Warning event per pod, counting repeats, as the
// kubelet's recorder does.
func (r *BuildReporter) record(ctx context.Context, pod *corev1.Pod, msg string) error {
	name := pod.Name + ".winkube-windows-build"
	ev := &corev1.Event{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, ev)
	now := metav1.Now()
	if apierrors.IsNotFound(err) {
		ev = &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			Type:           corev1.EventTypeWarning, Reason: MissingBuildReason, Message: msg, Count: 1,
			FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "winkube-admission"}}
		return client.IgnoreAlreadyExists(r.Client.Create(ctx, ev))
	}
	if err != nil {
		return err
	}
	if ev.Message == msg {
		return nil // said already; the pod changed for another reason
	}
	ev.Message, ev.Count, ev.LastTimestamp = msg, ev.Count+1, now
	return r.Client.Update(ctx, ev)
}

// requiredBuilds are the Windows builds a pod's required node affinity
// allows (those placement wrote), nil when it does not restrict them.
func requiredBuilds(spec *corev1.PodSpec) []string { return RequiredValues(spec, WindowsBuildLabel) }

// RequiredValues are the values a pod's required node affinity allows for
// a node label (its In expressions, over every term), nil when none names it.
func RequiredValues(spec *corev1.PodSpec, key string) []string {
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, t := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key != key || e.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			for _, v := range e.Values {
				if !seen[v] {
					seen[v] = true
					out = append(out, v)
				}
			}
		}
	}
	return out
}
