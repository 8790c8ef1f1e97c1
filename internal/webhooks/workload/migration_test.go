package workload_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/webhooks/workload"
)

// zoneTerm is a user's own required node affinity.
func zoneTerm() *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"westeurope-1"}}}}}}}}
}

func hasZoneTerm(spec *corev1.PodSpec) bool {
	return strings.Join(workload.RequiredValues(spec, corev1.LabelTopologyZone), ",") == "westeurope-1"
}

func setImage(t *testing.T, d *appsv1.Deployment, image string) {
	t.Helper()
	d.Spec.Template.Spec.Containers[0].Image = image
	if err := env.Client.Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

// A Deployment whose image moves from ltsc2019 to ltsc2022 gets the build
// affinity of its new image, not the 2019 one admission wrote for the old;
// the user's own expressions stay, and so does a windows-build expression
// the user wrote. The Deployment's ReplicaSet keeps its template as the
// Deployment controller made it, and each pod is placed by its images.
func TestImageChangeRewritesAdmissionsBuildAffinity(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	labels := map[string]string{"app": "iis"}
	spec := pod(ns, imgCore2019).Spec
	spec.Affinity = zoneTerm()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "iis", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if err := env.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := buildAffinity(&d.Spec.Template.Spec); got != "10.0.17763" || d.Spec.Template.Annotations[workload.BuildsAnnotation] != "10.0.17763" {
		t.Fatalf("ltsc2019: affinity %q, mark %v", got, d.Spec.Template.Annotations)
	}
	stale := d.Spec.Template.DeepCopy()

	setImage(t, d, imgCore2022)
	if got := buildAffinity(&d.Spec.Template.Spec); got != "10.0.20348,10.0.26100" {
		t.Errorf("after the move to ltsc2022 the template requires builds %q, want 10.0.20348,10.0.26100", got)
	}
	if !hasZoneTerm(&d.Spec.Template.Spec) || len(d.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) != 1 {
		t.Errorf("the user's zone expression was not kept in its one term: %+v", d.Spec.Template.Spec.Affinity)
	}
	if d.Spec.Template.Annotations[workload.BuildsAnnotation] != "10.0.20348,10.0.26100" || !workload.WroteBuildAffinity(d.Spec.Template.Annotations, &d.Spec.Template.Spec) {
		t.Errorf("mark %v", d.Spec.Template.Annotations)
	}

	// A multi-build image is not pinned to one build.
	setImage(t, d, imgWinAll)
	if got := buildAffinity(&d.Spec.Template.Spec); got != "10.0.17763,10.0.20348,10.0.26100" {
		t.Errorf("iis:latest requires builds %q, want every build it offers", got)
	}

	// The ReplicaSet the Deployment controller writes from the template is
	// stored as written, and its pods are placed from their own images.
	tmpl := *d.Spec.Template.DeepCopy()
	tmpl.Labels = map[string]string{"app": "iis", appsv1.DefaultDeploymentUniqueLabelKey: "abc"}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "iis-abc", Namespace: ns, Labels: tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptrTo(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
	}
	if err := env.Client.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if got := buildAffinity(&rs.Spec.Template.Spec); got != "10.0.17763,10.0.20348,10.0.26100" {
		t.Errorf("ReplicaSet template requires %q", got)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "iis-abc-", Namespace: ns, Labels: tmpl.Labels, Annotations: tmpl.Annotations}, Spec: tmpl.Spec}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := buildAffinity(&p.Spec); got != "10.0.17763,10.0.20348,10.0.26100" || !hasZoneTerm(&p.Spec) {
		t.Errorf("pod of the ReplicaSet: builds %q, zone kept %v", got, hasZoneTerm(&p.Spec))
	}

	// A pod made from a template admission did not see change (it was
	// down: its failure policy is Ignore) is placed by its own image.
	stale.Spec.Containers[0].Image = imgCore2022
	p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "iis-", Namespace: ns, Annotations: stale.Annotations}, Spec: stale.Spec}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := buildAffinity(&p.Spec); got != "10.0.20348,10.0.26100" || !hasZoneTerm(&p.Spec) {
		t.Errorf("pod from a stale template: builds %q, zone kept %v", got, hasZoneTerm(&p.Spec))
	}

	// The user's own windows-build expression is the user's to change.
	own := pod(ns, imgCore2019)
	own.Spec.Affinity = zoneTerm()
	terms := own.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	terms[0].MatchExpressions = append(terms[0].MatchExpressions, corev1.NodeSelectorRequirement{Key: workload.WindowsBuildLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"10.0.17763"}})
	d2 := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: own.Spec},
		},
	}
	if err := env.Client.Create(ctx, d2); err != nil {
		t.Fatal(err)
	}
	setImage(t, d2, imgCore2022)
	if got := buildAffinity(&d2.Spec.Template.Spec); got != "10.0.17763" || !hasZoneTerm(&d2.Spec.Template.Spec) {
		t.Errorf("the user's windows-build expression: %q, zone kept %v", got, hasZoneTerm(&d2.Spec.Template.Spec))
	}
	if _, marked := d2.Spec.Template.Annotations[workload.BuildsAnnotation]; marked || workload.WroteBuildAffinity(d2.Spec.Template.Annotations, &d2.Spec.Template.Spec) {
		t.Error("the user's expression was marked as admission's")
	}
}

func ptrTo[T any](v T) *T { return &v }

func cordonedNode(t *testing.T, name, build string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "windows", workload.WindowsBuildLabel: build}},
		Spec: corev1.NodeSpec{Unschedulable: true}}
	if err := env.Client.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	return n
}

func eventsOf(t *testing.T, ns string) []corev1.Event {
	t.Helper()
	events := &corev1.EventList{}
	if err := env.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return events.Items
}

// During a move off Windows Server 2019 (2022 nodes beside the 2019 ones,
// which are cordoned, then deleted) a pod of an ltsc2019-only image stays
// Pending with an event naming the tag of its repository that runs on the
// 2022 nodes; a pod of a multi-build image is placed on every build it
// offers and nobody is told anything.
func TestMigrationPendingEventNamesTheTag(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	windowsNode(t, "mig-2022-a", "10.0.20348")
	old := cordonedNode(t, "mig-2019-a", "10.0.17763")
	r := &workload.BuildReporter{Client: env.Client, Resolver: adm.Resolver}

	iis := pod(ns, imgCore2019)
	if err := env.Client.Create(ctx, iis); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(iis)}); err != nil {
		t.Fatal(err)
	}
	events := eventsOf(t, ns)
	if len(events) != 1 {
		t.Fatalf("%d events with the 2019 node cordoned, want 1: %+v", len(events), events)
	}
	msg := events[0].Message
	want := "image " + imgCore2019 + " runs on Windows 10.0.17763 (Windows Server 2019) only (process isolation needs the host's build); " +
		"this cluster's schedulable Windows nodes are 10.0.20348 (Windows Server 2022) (its 10.0.17763 (Windows Server 2019) nodes are cordoned or being removed): " +
		"use image " + imgCore2022 + " instead of " + imgCore2019 + " (it runs on this cluster's schedulable Windows nodes); or keep a Windows Server 2019 node schedulable until the image is changed"
	if msg != want {
		t.Errorf("event\n%s\nwant\n%s", msg, want)
	}
	for _, want := range []string{"use image " + imgCore2022 + " instead of " + imgCore2019, "schedulable Windows nodes are 10.0.20348 (Windows Server 2022)",
		"10.0.17763 (Windows Server 2019) nodes are cordoned or being removed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event %q lacks %q", msg, want)
		}
	}
	if events[0].Reason != workload.MissingBuildReason || events[0].InvolvedObject.UID != iis.UID {
		t.Errorf("event %+v", events[0])
	}

	// A multi-build image may go to every build it offers: the 2022 node.
	ns2 := namespace(t, nil)
	multi := pod(ns2, imgWinAll)
	if err := env.Client.Create(ctx, multi); err != nil {
		t.Fatal(err)
	}
	if got := buildAffinity(&multi.Spec); got != "10.0.17763,10.0.20348,10.0.26100" {
		t.Fatalf("iis:latest requires builds %q, want all it offers", got)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(multi)}); err != nil {
		t.Fatal(err)
	}
	if events := eventsOf(t, ns2); len(events) != 0 {
		t.Fatalf("events for a multi-build image: %+v", events)
	}

	// Uncordoned, the 2019 node runs it again; deleted (Cluster API's
	// Machine deletion holds it with a finalizer while it drains), not.
	old.Spec.Unschedulable = false
	old.Finalizers = []string{"winkube.dev/test"}
	if err := env.Client.Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Get(ctx, client.ObjectKeyFromObject(old), old)
		old.Finalizers = nil
		_ = env.Client.Update(ctx, old)
	})
	ns3 := namespace(t, nil)
	again := pod(ns3, imgCore2019)
	if err := env.Client.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(again)}); err != nil {
		t.Fatal(err)
	}
	if events := eventsOf(t, ns3); len(events) != 0 {
		t.Fatalf("events with a schedulable 2019 node: %+v", events)
	}
	if err := env.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(again)}); err != nil {
		t.Fatal(err)
	}
	if events := eventsOf(t, ns3); len(events) != 1 || !strings.Contains(events[0].Message, imgCore2022) {
		t.Fatalf("events with the 2019 node being deleted: %+v", events)
	}
}
