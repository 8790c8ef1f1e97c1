package metricsserver

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A container needs two points; a restart between two scrapes starts it
// over instead of reporting a negative rate.
func TestStoreRates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ref := types.NamespacedName{Namespace: "default", Name: "web"}
	s := &store{resolution: 15 * time.Second}
	at := func(d time.Duration, start time.Time, cpu uint64) batch {
		return batch{nodes: map[string]point{"n": {at: t0.Add(d), cpu: cpu * 2, mem: 1}}, pods: map[types.NamespacedName]map[string]point{ref: {"app": {start: start, at: t0.Add(d), cpu: cpu, mem: 64}}}}
	}
	start := t0.Add(-time.Hour)
	s.put(at(0, start, 1e9))
	if _, _, ok := s.pod(ref); ok || s.ready() {
		t.Fatal("answered after one scrape")
	}
	s.put(at(15*time.Second, start, 4e9))
	ctrs, u, ok := s.pod(ref)
	if !ok || len(ctrs) != 1 || ctrs[0].list.Cpu().MilliValue() != 200 || u.window != 15*time.Second {
		t.Fatalf("after two scrapes: %v %+v %v", ok, ctrs, u)
	}
	if n, ok := s.node("n"); !ok || n.list.Cpu().MilliValue() != 400 {
		t.Errorf("node %+v", n)
	}
	// Restarted 5s ago, counter back at 0.5s: 5s is under freshContainerMin,
	// so no zero point is made up and the pod waits for its next scrape.
	s.put(at(30*time.Second, t0.Add(25*time.Second), 5e8))
	if _, _, ok := s.pod(ref); ok {
		t.Error("a restarted container is answered from its previous run's point")
	}
	// A fresh container 12s old gets a zero point at its start.
	s.put(at(45*time.Second, t0.Add(33*time.Second), 6e9))
	if ctrs, _, ok := s.pod(ref); !ok || ctrs[0].list.Cpu().MilliValue() != 500 {
		t.Errorf("fresh container: %v %+v", ok, ctrs)
	}
}
