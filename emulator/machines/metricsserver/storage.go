package metricsserver

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// What metrics-server keeps between scrapes and how it turns counters
// into usage, as kubernetes-sigs/metrics-server v0.8.0 pkg/storage does
// (types.go resourceUsage, node.go and pod.go Store and GetMetrics):
//   - for each node and container it keeps the last point and the one
//     before it; usage is the CPU counter's increase divided by the time
//     between the two, so an answer needs two scrapes (storage.Ready);
//   - the answer's timestamp is the last point's, its window the time
//     between the two (a pod's: its containers' earliest);
//   - a container that started less than a resolution before its first
//     point, but at least freshContainerMin before, gets a point of zero
//     at its start as the previous one, so a fresh container is answered
//     after one scrape;
//   - a restarted container (its start time after the last point) starts
//     over; a counter that went back is skipped;
//   - a pod is answered only when all its containers have two points.

// freshContainerMin is metrics-server's freshContainerMinMetricsResolution
// (pkg/storage/pod.go, v0.8.0).
const freshContainerMin = 10 * time.Second

// point is one scrape's reading of a node or a container.
type point struct {
	start time.Time // a container's start; zero for a node
	at    time.Time
	cpu   uint64 // cumulative core-nanoseconds
	mem   uint64 // working set bytes
}

// batch is one scrape of every node.
type batch struct {
	nodes map[string]point
	pods  map[types.NamespacedName]map[string]point
}

type usage struct {
	at     time.Time
	window time.Duration
	list   corev1.ResourceList
}

// rate is usage between two points; ok is false when the counters went
// back (the node or container restarted between them).
func rate(last, prev point) (usage, bool) {
	if last.start.Before(prev.start) || last.cpu < prev.cpu {
		return usage{}, false
	}
	window := last.at.Sub(prev.at)
	if window <= 0 {
		return usage{}, false
	}
	nanocores := float64(last.cpu-prev.cpu) / window.Seconds()
	cpu := resource.NewScaledQuantity(int64(nanocores), resource.Nano)
	cpu.Format = resource.DecimalSI
	mem := resource.NewQuantity(int64(last.mem), resource.BinarySI)
	return usage{at: last.at, window: window, list: corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *mem}}, true
}

type store struct {
	resolution time.Duration

	mu                 sync.RWMutex
	lastNode, prevNode map[string]point
	lastPod, prevPod   map[types.NamespacedName]map[string]point
}

// ready is metrics-server's metric-storage-ready check: some node or
// container has two points.
func (s *store) ready() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.prevNode) > 0 || len(s.prevPod) > 0
}

func (s *store) put(b batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prevNode := map[string]point{}
	for name, p := range b.nodes {
		old, ok := s.lastNode[name]
		switch {
		case ok && p.at.After(old.at):
			prevNode[name] = old
		case ok:
			// The kubelet answered the same reading again: keep the
			// pair we had, if it is still older.
			if pp, ok := s.prevNode[name]; ok && pp.at.Before(p.at) {
				prevNode[name] = pp
			}
		}
	}
	prevPod := map[types.NamespacedName]map[string]point{}
	for ref, ctrs := range b.pods {
		prev := map[string]point{}
		for name, p := range ctrs {
			age := p.at.Sub(p.start)
			if p.start.Before(p.at) && age < s.resolution && age >= freshContainerMin {
				prev[name] = point{start: p.start, at: p.start, mem: p.mem}
				continue
			}
			old, ok := s.lastPod[ref][name]
			if !ok || !p.start.Before(old.at) {
				continue // new, or restarted since the last point
			}
			if p.at.After(old.at) {
				prev[name] = old
			} else if pp, ok := s.prevPod[ref][name]; ok && pp.at.Before(p.at) {
				prev[name] = pp
			}
		}
		if len(prev) > 0 {
			prevPod[ref] = prev
		}
	}
	s.lastNode, s.prevNode = b.nodes, prevNode
	s.lastPod, s.prevPod = b.pods, prevPod
}

func (s *store) node(name string) (usage, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	last, ok := s.lastNode[name]
	if !ok {
		return usage{}, false
	}
	prev, ok := s.prevNode[name]
	if !ok {
		return usage{}, false
	}
	return rate(last, prev)
}

// containerUsage is one container's part of a pod's answer.
type containerUsage struct {
	name string
	list corev1.ResourceList
}

// pod is a pod's containers' usage, and the pod's time and window.
func (s *store) pod(ref types.NamespacedName) ([]containerUsage, usage, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	last, ok := s.lastPod[ref]
	if !ok {
		return nil, usage{}, false
	}
	prev := s.prevPod[ref]
	var out []containerUsage
	var earliest usage
	for name, lp := range last {
		pp, ok := prev[name]
		if !ok {
			return nil, usage{}, false
		}
		u, ok := rate(lp, pp)
		if !ok {
			continue
		}
		out = append(out, containerUsage{name: name, list: u.list})
		if earliest.at.IsZero() || u.at.Before(earliest.at) {
			earliest = u
		}
	}
	return out, earliest, true
}
