package kubelet_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/internal/poll"
)

// TestServiceVariablesComeFromTheInformer covers the Services the kubelet
// reads to build a container's environment: from its informer of them
// (kubernetes pkg/kubelet/kubelet.go serviceLister @000d9543), so that
// twenty container starts list the Services once, not twenty times, and a
// Service created later is in the next container's variables.
func TestServiceVariablesComeFromTheInformer(t *testing.T) {
	env := startAPIServer(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	const ns = "svc-env"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	service := func(name, clusterIP string) {
		t.Helper()
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if _, err := admin.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	service("web", "")
	service("headless", corev1.ClusterIPNone)

	c := &requests{n: map[string]int{}}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	client := kubelet.Reads(counted(env.Config, c), done)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
	vars := func() map[string]string {
		t.Helper()
		e, err := containerruntime.Environment(ctx, client, pod, pod.Spec.Containers[0])
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, v := range e {
			out[v.Name] = v.Value
		}
		return out
	}
	for range 20 {
		v := vars()
		if v["KUBERNETES_SERVICE_HOST"] == "" || v["WEB_SERVICE_HOST"] == "" || v["WEB_SERVICE_PORT_HTTP"] != "80" {
			t.Fatalf("the container's Service variables %v lack the kubernetes Service's or web's", v)
		}
		if _, ok := v["HEADLESS_SERVICE_HOST"]; ok {
			t.Fatalf("a headless Service gave variables: %v", v)
		}
	}
	if n := c.get("GET services"); n != 0 {
		t.Errorf("20 container starts read a Service %d times from the API server, want none (the kubelet's lister)", n)
	}
	// The informer's list, and one more should its watch have broken.
	if n := c.get("LIST services"); n > 2 {
		t.Errorf("20 container starts listed the Services %d times, want the informer's one list", n)
	}

	service("api", "")
	poll.Until(t, time.Minute, func() string {
		if vars()["API_SERVICE_HOST"] == "" {
			return "waiting for the new Service in a container's variables"
		}
		return ""
	})
}
