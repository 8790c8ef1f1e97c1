package machines_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/registry"
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

// The real metrics-server runs with the Deployment's own command line,
// its container's paths and network moved where the process on the host
// has them: the emptyDir at /tmp under the container's directory, the
// pod's host address to bind, and the in-cluster credentials as a
// kubeconfig; every other flag as the manifest writes it.
func TestMetricsServerRunsWithItsPodsArguments(t *testing.T) {
	dir := t.TempDir()
	addr := netip.MustParseAddr("127.6.0.9")
	manifest := []string{"--cert-dir=/tmp", "--secure-port=10250", "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--kubelet-use-node-status-port", "--metric-resolution=15s", "--kubelet-insecure-tls", "--bind-address", "0.0.0.0"}
	got := machines.MetricsServerArgs(append([]string{"/metrics-server"}, manifest...), dir, addr, "/k/kubeconfig")
	want := []string{"--cert-dir=" + filepath.Join(dir, "fs", "tmp"), "--secure-port=10250", "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--kubelet-use-node-status-port", "--metric-resolution=15s", "--kubelet-insecure-tls", "--bind-address=127.6.0.9",
		"--kubeconfig=/k/kubeconfig", "--authentication-kubeconfig=/k/kubeconfig", "--authorization-kubeconfig=/k/kubeconfig"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("metrics-server runs with\n%v\nwant\n%v", got, want)
	}
	if st, err := os.Stat(filepath.Join(dir, "fs", "tmp")); err != nil || !st.IsDir() {
		t.Errorf("the certificate directory is not made: %v", err)
	}
	// A kubeconfig the pod gives is its own (moved like any path).
	got = machines.MetricsServerArgs([]string{"--kubeconfig", "/etc/ms/kubeconfig"}, dir, addr, "/k/kubeconfig")
	if j := strings.Join(got, " "); !strings.Contains(j, "--kubeconfig="+filepath.Join(dir, "fs", "etc/ms/kubeconfig")) || strings.Contains(j, "--kubeconfig=/k/") {
		t.Errorf("the pod's own kubeconfig: %v", got)
	}
}

// The program the runtime runs for the add-on's container is the release
// its image names: hack/tools pins sigs.k8s.io/metrics-server at the
// image's tag.
func TestMetricsServerProgramIsTheImagesRelease(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join("..", "..", "hack", "tools", "metrics-server", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	_, tag, _ := strings.Cut(registry.MetricsServerImage, ":")
	pin := regexp.MustCompile(`(?m)^\s*sigs\.k8s\.io/metrics-server (\S+)`).FindSubmatch(mod)
	if pin == nil || string(pin[1]) != tag {
		t.Errorf("hack/tools/metrics-server/go.mod pins sigs.k8s.io/metrics-server %q, want %s, the tag of %s", pin, tag, registry.MetricsServerImage)
	}
}
