package kubelet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/poll"
)

// BenchmarkKubeletPodStarts: what the simulated kubelets spend to bring
// pods to Running and Ready, the bring-up's share of them: 20 nodes, each
// given 3 pods at once (as the CNI, kube-proxy and cloud-node-manager
// DaemonSets bind theirs), one of them with a readiness probe. Reported
// per pod: this process's CPU (the kubelets and the test's watch) and
// the kubelets' requests; with -cpuprofile, where that CPU went.
func BenchmarkKubeletPodStarts(b *testing.B) {
	const nodes, perNode = 20, 3
	env := startAPIServer(b)
	ctx := context.Background()
	reg := catalogRegistry(b)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	c := &requests{n: map[string]int{}}
	client := counted(env.Config, c)
	addr := hostAddresses(b)
	for i := range nodes {
		name := fmt.Sprintf("start-node-%02d", i)
		cfg := nodeConfig(name, client, addr())
		cfg.Images, cfg.Log, cfg.NetworkConfigured = reg, logr.Discard(), func() bool { return true }
		k, err := kubelet.Start(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(k.Stop)
		cidr := fmt.Sprintf(`{"spec":{"podCIDR":"10.244.%d.0/24","podCIDRs":["10.244.%d.0/24"]}}`, i, i)
		if _, err := admin.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(cidr), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 10}
	round := 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ns := fmt.Sprintf("round-%d", round)
		round++
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		req0, cpu0 := c.total(), rusage()
		b.StartTimer()
		for i := range nodes {
			for j := range perNode {
				ctr := corev1.Container{Name: "app", Image: "registry.k8s.io/pause:3.10"}
				if j == 0 {
					ctr.ReadinessProbe = probe
				}
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%02d-%d", i, j), Namespace: ns},
					Spec: corev1.PodSpec{NodeName: fmt.Sprintf("start-node-%02d", i), Containers: []corev1.Container{ctr}}}
				if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		poll.Until(b, 3*time.Minute, func() string {
			l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err.Error()
			}
			ready := 0
			for i := range l.Items {
				if l.Items[i].Status.Phase == corev1.PodRunning && podIsReady(&l.Items[i]) {
					ready++
				}
			}
			if ready < nodes*perNode {
				return fmt.Sprintf("%d/%d pods Ready", ready, nodes*perNode)
			}
			return ""
		})
		b.StopTimer()
		pods := float64(nodes * perNode)
		b.ReportMetric(float64((rusage()-cpu0).Microseconds())/pods, "cpu-µs/pod")
		b.ReportMetric(float64(c.total()-req0)/pods, "requests/pod")
		b.StartTimer()
	}
}

// catalogRegistry is a registry holding the local world's images, as the
// nodes pull them.
func catalogRegistry(tb testing.TB) *registry.Registry {
	tb.Helper()
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = reg.Close() })
	if err := reg.PushAll(context.Background(), registry.Catalog("v1.36.3", nil)); err != nil {
		tb.Fatal(err)
	}
	return reg
}
