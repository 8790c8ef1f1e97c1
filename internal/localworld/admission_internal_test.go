package localworld

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/internal/flavors"
)

// The local world serves the workload admission with the admission pod's
// own ServiceAccount token, not the workload's admin credentials: what
// the add-on's RBAC does not grant fails here as in a cluster.
func TestAdmissionActsAsItsPod(t *testing.T) {
	env := sharedAPI.Env(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flavors.AdmissionNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(flavors.AdmissionNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "winkube-admission"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods(flavors.AdmissionNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "winkube-admission-x", Labels: map[string]string{"app.kubernetes.io/name": "winkube-admission"}},
		Spec:       corev1.PodSpec{ServiceAccountName: "winkube-admission", Containers: []corev1.Container{{Name: "admission", Image: flavors.AdmissionImage()}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := admissionRunning(ctx, env.Config); err != nil || got != nil {
		t.Fatalf("a pending admission pod counts as running: %v %v", got, err)
	}
	pod.Status.Phase = corev1.PodRunning
	if _, err := cs.CoreV1().Pods(flavors.AdmissionNamespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	running, err := admissionRunning(ctx, env.Config)
	if err != nil || running == nil || running.UID != pod.UID {
		t.Fatalf("the running admission pod: %v %v", running, err)
	}
	cfg, err := podConfig(env.Config, running)
	if err != nil {
		t.Fatal(err)
	}
	r, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + flavors.AdmissionNamespace + ":winkube-admission"; r.Status.UserInfo.Username != want {
		t.Errorf("the admission acts as %q, want %q", r.Status.UserInfo.Username, want)
	}
	if got := r.Status.UserInfo.Extra["authentication.kubernetes.io/pod-uid"]; len(got) != 1 || got[0] != string(pod.UID) {
		t.Errorf("its token is bound to pod %v, want %s", got, pod.UID)
	}
}
