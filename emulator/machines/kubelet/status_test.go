package kubelet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/kubelet"
)

// TestPodStatusWrittenOnlyWhenItChanges: the kubelet's status manager
// sends a pod's status only when it differs from what the API server has,
// as a patch of the status subresource (kubernetes/kubernetes
// pkg/kubelet/status/status_manager.go @0033cb0a). Every status write the
// simulated kubelet sends must change the pod's status: a sync brought by
// the event of its own write, or by a change of the pod's labels, writes
// nothing. Counted from the kubelet's requests to a real API server, and
// from the pod's watch for what actually changed.
func TestPodStatusWrittenOnlyWhenItChanges(t *testing.T) {
	env := startAPIServer(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	reg := catalogRegistry(t)
	const node = "status-node"
	c := &requests{n: map[string]int{}}
	cfg := nodeConfig(node, counted(env.Config, c), hostAddresses(t)())
	cfg.Images, cfg.Log, cfg.NetworkConfigured = reg, logr.Discard(), func() bool { return true }
	k, err := kubelet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.244.7.0/24","podCIDRs":["10.244.7.0/24"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// What the API server changed in the pods' status, from their watch.
	w, err := admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	last := map[string]corev1.PodStatus{}
	changes := 0
	// waitReady reads the watch until pod name is Running and Ready,
	// counting every event that changed a pod's status.
	waitReady := func(name string) {
		t.Helper()
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case <-timeout:
				t.Fatalf("pod %s not Running and Ready after 2m (status %+v)", name, last[name])
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("the pods' watch ended")
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod || ev.Type == watch.Deleted {
					continue
				}
				if old, seen := last[p.Name]; seen && !equality.Semantic.DeepEqual(old, p.Status) {
					changes++
				}
				last[p.Name] = p.Status
				if p.Name == name && p.Status.Phase == corev1.PodRunning && podIsReady(p) {
					return
				}
			}
		}
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod("first"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady("first")
	// Each label change brings the pod to a sync whose status is the one
	// it has.
	for i := range 3 {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"touched":"%d"}}}`, i)
		if _, err := admin.CoreV1().Pods("default").Patch(ctx, "first", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet syncs its pods one at a time, in the order their events
	// came: once the second pod runs, the first one's syncs are done.
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod("second"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady("second")

	if n := c.get("PUT pods/status"); n != 0 {
		t.Errorf("the kubelet replaced pod status %d times, want patches only", n)
	}
	if writes := c.get("PUT pods/status") + c.get("PATCH pods/status"); writes != changes {
		t.Errorf("the kubelet wrote pod status %d times for %d changes of it: a status write that changes nothing is one its status manager does not send", writes, changes)
	}
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
