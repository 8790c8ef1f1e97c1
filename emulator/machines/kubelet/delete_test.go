package kubelet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/internal/poll"
)

// waitsImage is a container whose process runs and waits for something
// that never comes (StartCheck's *Waiting): an init container of it never
// completes, as calico's install-cni or a wait-for-service init does.
const waitsImage = "registry.k8s.io/pause:3.10.1"

// TestEvictedPodsLeaveTheNode: Cluster API's drain evicts a node's pods
// and then waits until each is gone from the API (cluster-api v1.14.2
// core/reconcilers/machine/drain/drain.go EvictPods: a pod with a
// deletionTimestamp holds the drain until it is removed). A Ready node's
// kubelet removes a deleted pod whatever state it is in once its
// containers are stopped: the status manager deletes it with grace 0 and
// its UID as precondition (kubernetes pkg/kubelet/status/status_manager.go
// canBeDeleted and syncPod, at fde2d3c4). Each state a drained pod may be
// in is evicted here and must be gone from the API.
func TestEvictedPodsLeaveTheNode(t *testing.T) {
	// It mostly waits (pods run their simulated seconds, grace periods
	// end) and owns what it touches on the shared API server (the Node
	// node-d, the namespace evict): it waits beside the package's other
	// parallel test, without starting an API server of its own.
	t.Parallel()
	client, err := kubernetes.NewForConfig(apiServer.Env(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	const node, ns = "node-d", "evict"
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k, err := Start(ctx, Config{
		NodeName: node, Client: client, Address: testAddress(t), Host: linux, Images: startRegistry(t),
		NodeInfo: corev1.NodeSystemInfo{OSImage: "Ubuntu 24.04.1 LTS", OperatingSystem: "linux"},
		Log:      logr.Discard(), NetworkConfigured: func() bool { return true },
		StartCheck: func(_ context.Context, pod *corev1.Pod, c *corev1.Container, _ *Pulled) error {
			if c.Image == waitsImage && pod.Labels["waits"] == c.Name {
				return &Waiting{Message: "waiting for the service"}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.244.13.0/24","podCIDRs":["10.244.13.0/24"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	pause := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.k8s.io/pause:3.10"}
	}
	phaseIs := func(want corev1.PodPhase) func(p *corev1.Pod) string {
		return func(p *corev1.Pod) string {
			if p.Status.Phase != want {
				return fmt.Sprintf("phase %q, want %q", p.Status.Phase, want)
			}
			return ""
		}
	}
	waitingAs := func(reason string) func(p *corev1.Pod) string {
		return func(p *corev1.Pod) string {
			for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if cs.State.Waiting != nil && cs.State.Waiting.Reason == reason {
					return ""
				}
			}
			return fmt.Sprintf("no container waiting as %s yet (phase %q)", reason, p.Status.Phase)
		}
	}
	cases := []struct {
		name string
		spec corev1.PodSpec
		// labels and annotations say what the simulated processes do.
		labels, annotations map[string]string
		// before is the state the pod is evicted in ("" when it is).
		before func(p *corev1.Pod) string
	}{{
		name:   "running",
		spec:   corev1.PodSpec{Containers: []corev1.Container{pause("app")}},
		before: phaseIs(corev1.PodRunning),
	}, {
		name:   "host-network",
		spec:   corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{pause("app")}},
		before: phaseIs(corev1.PodRunning),
	}, {
		name:   "long-grace",
		spec:   corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](3600), Containers: []corev1.Container{pause("app")}},
		before: phaseIs(corev1.PodRunning),
	}, {
		name:   "init-waiting",
		labels: map[string]string{"waits": "init"},
		spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init", Image: waitsImage}},
			Containers: []corev1.Container{pause("app")}},
		before: waitingAs("PodInitializing"),
	}, {
		name:   "pulling-fails",
		spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.invalid/none:1"}}},
		before: phaseIs(corev1.PodPending),
	}, {
		name: "volume-unbound",
		spec: corev1.PodSpec{Containers: []corev1.Container{pause("app")}, Volumes: []corev1.Volume{{Name: "data",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "missing"}}}}},
		before: waitingAs("ContainerCreating"),
	}, {
		name:        "succeeded",
		annotations: map[string]string{RunSecondsAnnotation: "1"},
		spec:        corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{pause("job")}},
		before:      phaseIs(corev1.PodSucceeded),
	}, {
		name:        "failed",
		annotations: map[string]string{RunSecondsAnnotation: "1", ExitCodeAnnotation: "3"},
		spec:        corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{pause("job")}},
		before:      phaseIs(corev1.PodFailed),
	}, {
		name:   "just-created",
		spec:   corev1.PodSpec{Containers: []corev1.Container{pause("app")}},
		before: func(*corev1.Pod) string { return "" },
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each case is a pod of its own name: they run their
			// simulated seconds side by side.
			t.Parallel()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: ns, Labels: c.labels, Annotations: c.annotations}, Spec: c.spec}
			pod.Spec.NodeName = node
			if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, time.Minute, func() string {
				p, err := client.CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				return c.before(p)
			})
			// As Cluster API's drain does (drain.go evictPod): an
			// Eviction with the pod's own grace period.
			ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: ns}}
			if err := client.CoreV1().Pods(ns).EvictV1(ctx, ev); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, time.Minute, func() string {
				p, err := client.CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return ""
				}
				if err != nil {
					return err.Error()
				}
				return fmt.Sprintf("evicted pod %s still in the API (deletionTimestamp %v, phase %q)", c.name, p.DeletionTimestamp, p.Status.Phase)
			})
		})
	}
}
