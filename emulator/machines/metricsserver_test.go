package machines_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/kubelet"
)

// The metrics-server process acts as its pod's service account, with a
// token bound to the pod: the API server knows it by that name, and the
// administrator's client certificate is not passed on.
func TestModelledProcessActsAsItsServiceAccount(t *testing.T) {
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ms-token"}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	if _, err := admin.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods(ns.Name).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server"}, Spec: corev1.PodSpec{
		ServiceAccountName: "metrics-server", Containers: []corev1.Container{{Name: "metrics-server", Image: "registry.k8s.io/metrics-server/metrics-server:v0.8.0"}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := machines.ServiceAccountConfig(env.Config, admin, pod)
	if len(cfg.CertData) > 0 || cfg.CertFile != "" {
		t.Fatal("the administrator's client certificate is passed on")
	}
	c := kubernetes.NewForConfigOrDie(cfg)
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Status.UserInfo.Username; got != "system:serviceaccount:ms-token:metrics-server" {
		t.Errorf("the process is %q", got)
	}
	if got := r.Status.UserInfo.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != "metrics-server" {
		t.Errorf("the token is not bound to the pod: extra %v", r.Status.UserInfo.Extra)
	}
}

// metrics-server ends at once on flags its validation refuses, as the
// real process panics with the error; other images are not its concern.
func TestMetricsServerRefusesItsBadFlags(t *testing.T) {
	bad := &corev1.Container{Image: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", Args: []string{"--metric-resolution=5s"}}
	var exited *kubelet.Exited
	if err := machines.MetricsServerStart(bad); !errors.As(err, &exited) || exited.Code != 2 || !strings.Contains(exited.Message, "at least 10s") {
		t.Errorf("a 5s resolution: %v", err)
	}
	good := &corev1.Container{Image: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", Args: []string{"--secure-port=10250", "--metric-resolution=15s", "--kubelet-insecure-tls"}}
	if err := machines.MetricsServerStart(good); err != nil {
		t.Errorf("the manifest's flags: %v", err)
	}
	if err := machines.MetricsServerStart(&corev1.Container{Image: "docker.io/library/busybox:1.36", Args: []string{"--metric-resolution=5s"}}); err != nil {
		t.Errorf("busybox: %v", err)
	}
}
