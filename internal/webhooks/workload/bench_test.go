package workload_test

import (
	"context"
	"sort"
	"testing"
	"time"

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
