package workload

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// MissingBuildReason is the reason of the event on a pod that waits for a
// Windows build no node of the cluster has.
const MissingBuildReason = "NoWindowsNodeOfBuild"

var releaseOf = map[string]string{build2019: "2019", build2022: "2022", build2025: "2025"}

// BuildReporter explains pods that placement sent to a Windows build no
// schedulable node of the cluster has: the scheduler only says that no node
// matched the affinity, not which build the image needs nor which tag of
// it runs on the nodes there are.
type BuildReporter struct {
	Client client.Client
	// Resolver, when set, finds the tag of each image's repository that
	// runs on the remaining nodes, for the event to name it.
	Resolver *Resolver

	mu    sync.Mutex
	fixes map[string]fixEntry
	// waiting reads the pods waitingForBuild indexes: the manager's cache,
	// set up by SetupWithManager.
	waiting client.Reader
}

// waitingIndex indexes the pods a Windows node's change can concern: not
// yet bound to a node, and requiring a Windows build. A node joining or
// being cordoned then reads those alone. Listing every pod of the cluster
// instead copied each of them out of the cache on every Windows node's
// arrival, as many times as there are Windows nodes: 4 % of winkube's
// CPU in a local world that 400 Windows nodes joined.
const waitingIndex = "winkube.dev/waiting-for-build"

// waitingForBuild is waitingIndex's value for a pod: "true", or none.
func waitingForBuild(o client.Object) []string {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Spec.NodeName != "" || len(requiredBuilds(&p.Spec)) == 0 {
		return nil
	}
	return []string{"true"}
}

type fixEntry struct {
	use string
	at  time.Time
}

// fixTTL is how long a tag found for an image is trusted: the replicas of
// one workload wait together, and the scheduler's status updates bring
// each back several times.
const fixTTL = time.Minute

// SetupWithManager watches pods that are not yet scheduled, and Windows
// nodes: a node cordoned or removed (a pool being drained) can leave the
// pods waiting for it with nowhere to go.
func (r *BuildReporter) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, waitingIndex, waitingForBuild); err != nil {
		return fmt.Errorf("indexing the pods that wait for a Windows build: %w", err)
	}
	r.waiting = mgr.GetCache()
	unscheduled := predicate.NewPredicateFuncs(func(o client.Object) bool { return len(waitingForBuild(o)) > 0 })
	noDelete := predicate.Funcs{DeleteFunc: func(event.DeleteEvent) bool { return false }}
	windows := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[corev1.LabelOSStable] == "windows" })
	// One process may serve several clusters' admission (the local world):
	// the name repeats across their managers.
	return ctrl.NewControllerManagedBy(mgr).Named("windows-build-reporter").
		For(&corev1.Pod{}, builder.WithPredicates(unscheduled, noDelete)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.waitingPods), builder.WithPredicates(windows, placementChanged)).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(r)
}

// waitingPods are the unscheduled pods whose affinity requires a Windows
// build.
func (r *BuildReporter) waitingPods(ctx context.Context, _ client.Object) []reconcile.Request {
	pods := &corev1.PodList{}
	if err := r.waiting.List(ctx, pods, client.MatchingFields{waitingIndex: "true"}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the pods that wait for a Windows build")
		return nil
	}
	out := make([]reconcile.Request, 0, len(pods.Items))
	for i := range pods.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])})
	}
	return out
}

// placementChanged passes a Windows node's changes that move what the
// reporter counts: its build, its cordon, its deletion.
var placementChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*corev1.Node)
	n, okNew := e.ObjectNew.(*corev1.Node)
	return okOld && okNew && (o.Spec.Unschedulable != n.Spec.Unschedulable ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
		o.Labels[WindowsBuildLabel] != n.Labels[WindowsBuildLabel])
}}

// Reconcile records an event on the pod when no schedulable Windows node
// has one of the builds its affinity requires.
//
// Cordoned nodes (spec.unschedulable) and nodes being deleted do not count
// as remaining: 'kubectl drain', and Cluster API before it deletes a
// Machine, cordon a node first, so during a move off a Windows release the
// old nodes are cordoned while their pods are evicted, and the scheduler
// places no new pod on them (kubernetes v1.31
// pkg/scheduler/framework/plugins/nodeunschedulable). A pod that only they
// would run waits for good, which is what the event must say.
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
	have, leaving := map[string]bool{}, map[string]bool{}
	for _, n := range nodes.Items {
		b := n.Labels[WindowsBuildLabel]
		switch {
		case b == "":
		case n.Spec.Unschedulable || n.DeletionTimestamp != nil:
			leaving[b] = true
		default:
			have[b] = true
		}
	}
	for _, b := range need {
		if have[b] {
			return ctrl.Result{}, nil // the scheduler will find it a node
		}
	}
	for b := range have {
		delete(leaving, b)
	}
	return ctrl.Result{}, r.record(ctx, pod, missingBuildMessage(pod, need, have, leaving, r.fixTags(ctx, pod, have)))
}

// fixTags finds, for each image of the pod that runs on none of the host
// builds, the tag of its repository that does.
func (r *BuildReporter) fixTags(ctx context.Context, pod *corev1.Pod, have map[string]bool) map[string]string {
	if r.Resolver == nil || len(have) == 0 {
		return nil
	}
	hosts := make([]string, 0, len(have))
	for b := range have {
		hosts = append(hosts, b)
	}
	sort.Strings(hosts)
	out := map[string]string{}
	for _, c := range containersOf(&pod.Spec) {
		if _, done := out[c.image]; done {
			continue
		}
		plats, err := r.Resolver.Platforms(ctx, c.image)
		if err != nil || len(WindowsBuilds(plats)) == 0 {
			continue
		}
		runs := false
		for _, h := range hosts {
			runs = runs || RunsOn(plats, h)
		}
		if runs {
			continue
		}
		if use := r.fixTag(ctx, c.image, hosts); use != "" {
			out[c.image] = use
		}
	}
	return out
}

func (r *BuildReporter) fixTag(ctx context.Context, image string, hosts []string) string {
	key := image + " " + strings.Join(hosts, ",")
	r.mu.Lock()
	if e, ok := r.fixes[key]; ok && time.Since(e.at) < fixTTL {
		r.mu.Unlock()
		return e.use
	}
	r.mu.Unlock()
	use, err := r.Resolver.FixTag(ctx, image, hosts, 0)
	if err != nil {
		return ""
	}
	r.mu.Lock()
	if r.fixes == nil {
		r.fixes = map[string]fixEntry{}
	}
	now := time.Now()
	for k, e := range r.fixes {
		if now.Sub(e.at) >= fixTTL {
			delete(r.fixes, k)
		}
	}
	r.fixes[key] = fixEntry{use: use, at: now}
	r.mu.Unlock()
	return use
}

// missingBuildMessage says which build the pod's images need, which builds
// the schedulable Windows nodes have (and which the cordoned or removed
// ones), and what to change: the tags found for the images (fixes), or a
// pool of the build.
func missingBuildMessage(pod *corev1.Pod, need []string, have, leaving map[string]bool, fixes map[string]string) string {
	var images []string
	for _, c := range pod.Spec.Containers {
		images = append(images, c.Image)
	}
	wanted := make([]string, 0, len(need))
	for _, b := range need {
		wanted = append(wanted, describeBuild(b))
	}
	got, gone := describeBuilds(have), describeBuilds(leaving)
	cluster := "this cluster has no Windows nodes"
	if len(got) > 0 {
		cluster = "this cluster's Windows nodes are " + strings.Join(got, ", ")
		if len(gone) > 0 {
			cluster = "this cluster's schedulable Windows nodes are " + strings.Join(got, ", ")
		}
	} else if len(gone) > 0 {
		cluster = "this cluster has no schedulable Windows nodes"
	}
	if len(gone) > 0 {
		cluster += " (its " + strings.Join(gone, ", ") + " nodes are cordoned or being removed)"
	}
	var uses []string
	said := map[string]bool{}
	for _, c := range containersOf(&pod.Spec) {
		if use, ok := fixes[c.image]; ok && !said[c.image] {
			said[c.image] = true
			uses = append(uses, "image "+use+" instead of "+c.image)
		}
	}
	// The tags of the release the nodes there are run.
	var tags []string
	for _, b := range []string{build2019, build2022, build2025} {
		if have[b] {
			tags = append(tags, "ltsc"+releaseOf[b])
		}
	}
	use := "use the image's " + strings.Join(tags, " or ") + " tag"
	if len(uses) > 0 {
		runs := "it runs"
		if len(uses) > 1 {
			runs = "they run"
		}
		use = "use " + strings.Join(uses, ", ") + " (" + runs + " on this cluster's schedulable Windows nodes)"
	}
	first := releaseOf[need[0]]
	var fix string
	switch {
	case anyOf(need, leaving) && len(tags) > 0:
		// A move off the release: the image must follow the nodes.
		fix = use + "; or keep a Windows Server " + first + " node schedulable until the image is changed"
	default:
		fix = fmt.Sprintf("add Windows Server %s nodes ('winkube up --windows-version %s' for a local cluster, or a MachineDeployment whose AzureMachineTemplate sets windowsServerVersion: \"%s\")", first, first, first)
		if len(tags) > 0 {
			fix += ", or " + use
		}
	}
	return fmt.Sprintf("image %s runs on Windows %s only (process isolation needs the host's build); %s: %s",
		strings.Join(images, ", "), strings.Join(wanted, " or "), cluster, fix)
}

func anyOf(list []string, set map[string]bool) bool {
	for _, s := range list {
		if set[s] {
			return true
		}
	}
	return false
}

func describeBuilds(set map[string]bool) []string {
	var out []string
	for b := range set {
		out = append(out, describeBuild(b))
	}
	sort.Strings(out)
	return out
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
