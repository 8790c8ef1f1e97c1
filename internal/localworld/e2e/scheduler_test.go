//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
)

// schedulerCrashSeenByKCP kills the kube-scheduler of one control-plane
// machine and keeps it from starting (its kubeconfig is moved away): the
// kubeadm control-plane provider, reconciling, marks that Machine's
// scheduler pod unhealthy and the control plane's components unhealthy;
// with the file back, the kubelet restarts it and the provider sees it
// healthy again.
func schedulerCrashSeenByKCP(t *testing.T, ctx context.Context, w *localworld.World, kcpName string) {
	t.Helper()
	ms := &clusterv1.MachineList{}
	if err := w.Client.List(ctx, ms, client.MatchingLabels{clusterv1.MachineControlPlaneLabel: ""}); err != nil || len(ms.Items) == 0 {
		t.Fatalf("control-plane machines: %d (%v)", len(ms.Items), err)
	}
	machine := ms.Items[0]
	var dir string
	var pid int
	for _, n := range w.Runtime().Nodes() {
		if n.NodeName == machine.Status.NodeRef.Name {
			dir, pid = n.Dir, n.Pids["kube-scheduler"]
		}
	}
	if pid == 0 {
		t.Fatalf("no kube-scheduler process for machine %s", machine.Name)
	}
	conf := filepath.Join(dir, "root", "etc", "kubernetes", "scheduler.conf")
	if err := os.Rename(conf, conf+".moved"); err != nil {
		t.Fatal(err)
	}
	moved := true
	restore := func() {
		if moved {
			moved = false
			if err := os.Rename(conf+".moved", conf); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	key := client.ObjectKey{Namespace: "default", Name: kcpName}
	// A healthy provider resyncs rarely; a change to its object (as
	// `kubectl annotate` makes) has it reconcile now.
	nudge := func() {
		if err := w.Client.Get(ctx, key, kcp); err != nil {
			return
		}
		p := client.MergeFrom(kcp.DeepCopy())
		kcp.Annotations = map[string]string{"test.winkube.dev/nudge": time.Now().Format(time.RFC3339Nano)}
		_ = w.Client.Patch(ctx, kcp, p)
	}
	state := func(want metav1.ConditionStatus) string {
		nudge()
		m := &clusterv1.Machine{}
		if err := w.Client.Get(ctx, client.ObjectKeyFromObject(&machine), m); err != nil {
			return err.Error()
		}
		sched := conditions.Get(m, controlplanev1.KubeadmControlPlaneMachineSchedulerPodHealthyCondition)
		all := conditions.Get(kcp, controlplanev1.KubeadmControlPlaneControlPlaneComponentsHealthyCondition)
		if sched == nil || sched.Status != want || all == nil || all.Status != want {
			return fmt.Sprintf("provider: machine %s scheduler %+v, components %+v; want %s", m.Name, sched, all, want)
		}
		return ""
	}
	poll.Until(t, 3*time.Minute, func() string { return state(metav1.ConditionFalse) })
	m := &clusterv1.Machine{}
	_ = w.Client.Get(ctx, client.ObjectKeyFromObject(&machine), m)
	t.Logf("provider sees the crashed scheduler: %+v", conditions.Get(m, controlplanev1.KubeadmControlPlaneMachineSchedulerPodHealthyCondition))
	restore()
	poll.Until(t, 4*time.Minute, func() string { return state(metav1.ConditionTrue) })
}
