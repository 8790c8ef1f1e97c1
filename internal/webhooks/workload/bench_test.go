package workload_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// BenchmarkAdmissionLatency measures the placement webhook's decision for a
// pod with two images (IIS 2022 and a multi-platform pause), from the
// admission request to the patch, with a warm cache and with a cold one (a
// new resolver per pod: every image read from the in-process registry).
// go test ./internal/webhooks/workload -run '^$' -bench AdmissionLatency -benchtime 1000x
func BenchmarkAdmissionLatency(b *testing.B) {
	for _, warm := range []bool{true, false} {
		name := "cold"
		if warm {
			name = "warm"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			req := request(b, "Pod", pod("default", img2022, imgMulti), "default")
			newAdmission := func() *workload.Admission {
				r := workload.NewResolver()
				r.Insecure = []string{regHost}
				return workload.New(r, nil)
			}
			a := newAdmission()
			if warm {
				a.Mutate().Handle(ctx, req)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !warm {
					b.StopTimer()
					a = newAdmission()
					b.StartTimer()
				}
				start := time.Now()
				resp := a.Mutate().Handle(ctx, req)
				lat = append(lat, time.Since(start))
				if !resp.Allowed || len(resp.Patches) == 0 {
					b.Fatalf("pod not placed: %+v", resp.Result)
				}
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkWaitingPods measures what a Windows node joining or being
// cordoned costs the build reporter: finding the pods that wait for a
// Windows build, among 1,000 pods already on nodes and 5 that wait.
// go test ./internal/webhooks/workload -run '^$' -bench WaitingPods -benchtime 2000x
func BenchmarkWaitingPods(b *testing.B) {
	ctx := context.Background()
	ns := namespace(b, nil)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		b.Fatal(err)
	}
	r := &workload.BuildReporter{Client: mgr.GetClient()}
	if err := r.SetupWithManager(mgr); err != nil {
		b.Fatal(err)
	}
	testenv.RunManager(b, mgr)
	const bound, waiting = 1000, 5
	for i := 0; i < bound+waiting; i++ {
		p := pod(ns, img2022)
		if i < bound {
			p.Spec.NodeName = fmt.Sprintf("bench-node-%d", i%100)
		}
		if err := env.Client.Create(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	poll.Until(b, time.Minute, func() string {
		pods := &corev1.PodList{}
		if err := mgr.GetCache().List(ctx, pods, client.InNamespace(ns)); err != nil {
			return err.Error()
		}
		if len(pods.Items) != bound+waiting {
			return fmt.Sprintf("the cache has %d pods of %d", len(pods.Items), bound+waiting)
		}
		return ""
	})
	for b.Loop() {
		if n := r.WaitingPods(ctx); n != waiting {
			b.Fatalf("%d pods wait, want %d", n, waiting)
		}
	}
}
