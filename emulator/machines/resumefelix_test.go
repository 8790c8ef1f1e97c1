package machines_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/kubelet"
)

// TestFelixStartedBeforeItsClusterIsKnown: a world resuming boots every
// machine at once, and a worker's kubelet may start calico-node while the
// runtime does not know the worker's cluster yet (its control-plane
// machine still runs kubeadm's phases, though its API server already
// answers through the load balancer). The start check must not let Felix
// run without its session then: nothing starts one later, so every other
// node's route to the worker's pods (and the worker's to theirs) stays
// missing for as long as the pod runs (TestUpAndDown's resets through the
// iis Service after the resume). It waits, and is asked again.
func TestFelixStartedBeforeItsClusterIsKnown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newRightsWorld(t, ctx, "felixresume")
	a, b := "felixresume-a", "felixresume-b"
	w.role(t, ctx, "calico-node", felixRules("")...)
	w.felix(t, ctx, "calico-node-a", a, "calico-node")
	pb := w.pod(t, ctx, "calico-node-b", b, "calico-node", corev1.Container{Name: "calico-node", Image: "docker.io/calico/node:v3.30.7"})
	t.Cleanup(func() { rt.StopComponents(b, pb) })
	target := w.servePod(t, "192.168.2.10")

	check := rt.ContainerStartCheck(ctx, "linux", b)
	restore := rt.HideCluster(b)
	err := check(pb, pb.Spec.Containers[0])
	restore()
	var wait *kubelet.Waiting
	if errors.As(err, &wait) {
		return
	}
	// The container runs: what it did not start never starts.
	time.Sleep(5 * time.Second)
	t.Fatalf("b's kubelet started calico-node while b's cluster was unknown (start check: %v) and no Felix session started: node a -> b's pod, 5 s after the cluster is known: %s",
		err, dialOutcome(ctx, a, target))
}
