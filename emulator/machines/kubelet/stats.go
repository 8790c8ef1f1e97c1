package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// Containers on a simulated node run no process, so they use no CPU or
// memory of their own. The kubelet's Summary API (/stats/summary) and
// resource metrics (/metrics/resource) report a usage derived from each
// running container's spec instead, by this model (not measured, not an
// upstream behaviour: the numbers are chosen so that a consumer sees what
// the pod asked for):
//
//   - CPU: the container's CPU request (DefaultCPUUsage when it has none)
//     times the pod's CPUUtilizationAnnotation percent (100 when unset),
//     capped by its CPU limit, else by the node's CPU capacity;
//   - memory working set: the memory request (DefaultMemoryUsage when none)
//     times MemoryUtilizationAnnotation percent (100), capped by the limit;
//   - a pod is the sum of its running containers; the node the sum of its
//     pods plus a fixed share for the OS and its daemons (systemShare);
//   - CPU is reported as a counter, cumulative core-seconds since the
//     container started (since the kubelet started for the node), so that
//     a consumer that takes the rate between two reads, as metrics-server
//     does, gets the modelled rate. A changed annotation changes the rate
//     from the read after the change on; the counter never goes back.
//
// Both endpoints say they are simulated: the text format with a comment
// line (SimulatedComment), the Summary JSON with a user-defined metric
// named SimulatedMetric on every container (the Summary type has no free
// field; userDefinedMetrics is the one list a container's entry carries
// whose content is not fixed by the kubelet), and both with the
// SimulatedHeader response header.
const (
	// CPUUtilizationAnnotation sets a pod's simulated CPU load in percent
	// of its containers' requests ("180" is 1.8 times the request), so
	// that a HorizontalPodAutoscaler can be made to scale up and down.
	// The simulation's knobs on a pod share the emulator's prefix
	// (emulator.winkube.dev/, as RunSecondsAnnotation): the emulator
	// knows Azure, not winkube, and winkube.dev/ is what the provider and
	// its admission read and write.
	CPUUtilizationAnnotation = "emulator.winkube.dev/cpu-utilization"
	// MemoryUtilizationAnnotation is the same for the memory working set.
	MemoryUtilizationAnnotation = "emulator.winkube.dev/memory-utilization"
	// DefaultCPUUsage is a container's usage without a CPU request.
	DefaultCPUUsage = "10m"
	// DefaultMemoryUsage is its working set without a memory request.
	DefaultMemoryUsage = "32Mi"
	// SimulatedMetric names the Summary's marker of simulated usage.
	SimulatedMetric = "winkube_simulated_usage"
	// SimulatedComment is the first line of /metrics/resource.
	SimulatedComment = "# winkube simulated node: no container process runs; usage is derived from each running container's requests and limits (and the pod's " + CPUUtilizationAnnotation + " annotation), not measured"
)

// systemShare is what the node's OS and daemons use besides the pods; a
// Windows Server host's own services take more memory than a Linux one's.
// Model values, not measurements.
func systemShare(os string) (cpuNano, memBytes uint64) {
	if os == "windows" {
		return 200_000_000, 1536 << 20
	}
	return 100_000_000, 512 << 20
}

// usageState keeps the counters between reads, so that they only grow.
type usageState struct {
	mu sync.Mutex
	// at is the last read; node the node's counter then.
	at   time.Time
	node float64
	ctrs map[ctrKey]*ctrCounter
}

type ctrKey struct {
	uid  types.UID
	name string
}

type ctrCounter struct {
	started time.Time
	at      time.Time
	nanos   float64
}

// usage is one running container's modelled usage.
type usage struct {
	name     string
	started  time.Time
	cpuNano  uint64 // nanocores
	cpuTotal uint64 // core-nanoseconds since started
	memBytes uint64
	memLimit uint64 // 0: none
}

// summary builds the Summary API's answer from the pods running on the
// node, as the API shows their containers (what this kubelet posted).
func (k *Kubelet) summary(ctx context.Context, now time.Time) (*statsapi.Summary, error) {
	k.mu.Lock()
	lister := k.pods
	k.mu.Unlock()
	if lister == nil {
		return nil, fmt.Errorf("node %s: the kubelet has not listed its pods yet", k.cfg.NodeName)
	}
	pods, err := lister.List(labelsEverything())
	if err != nil {
		return nil, err
	}
	cpuCap := uint64(k.cfg.Capacity.Cpu().MilliValue()) * 1_000_000
	s := &k.usage
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrs == nil {
		s.ctrs, s.at = map[ctrKey]*ctrCounter{}, k.started
	}
	sysCPU, sysMem := systemShare(k.cfg.Host.OS)
	nodeRate, nodeMem := sysCPU, sysMem
	seen := map[ctrKey]bool{}
	out := &statsapi.Summary{}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodRunning {
			continue
		}
		cpuPct, memPct := k.utilization(ctx, pod)
		var ctrs []usage
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Running == nil {
				continue
			}
			spec := containerSpec(pod, cs.Name)
			if spec == nil {
				continue
			}
			u := modelUsage(spec, cpuPct, memPct, cpuCap)
			u.name, u.started = cs.Name, cs.State.Running.StartedAt.Time
			key := ctrKey{pod.UID, cs.Name}
			seen[key] = true
			c := s.ctrs[key]
			if c == nil || !c.started.Equal(u.started) {
				// A new run of the container: its counter starts over,
				// as a restarted container's cgroup does.
				c = &ctrCounter{started: u.started, at: u.started}
				s.ctrs[key] = c
			}
			if now.After(c.at) {
				c.nanos += float64(u.cpuNano) * now.Sub(c.at).Seconds()
				c.at = now
			}
			u.cpuTotal = uint64(c.nanos)
			ctrs = append(ctrs, u)
			nodeRate += u.cpuNano
			nodeMem += u.memBytes
		}
		if len(ctrs) == 0 {
			continue
		}
		out.Pods = append(out.Pods, k.podStats(pod, ctrs, now))
	}
	for key := range s.ctrs {
		if !seen[key] {
			delete(s.ctrs, key)
		}
	}
	if now.After(s.at) {
		s.node += float64(nodeRate) * now.Sub(s.at).Seconds()
		s.at = now
	}
	out.Node = k.nodeStats(now, nodeRate, uint64(s.node), nodeMem)
	return out, nil
}

// utilization reads the pod's load annotations, in percent; a value that
// is not a whole number of percent is told in an event and ignored.
func (k *Kubelet) utilization(ctx context.Context, pod *corev1.Pod) (cpu, mem uint64) {
	read := func(ann string) uint64 {
		v, ok := pod.Annotations[ann]
		if old := deprecatedUtilization[ann]; !ok {
			if v, ok = pod.Annotations[old]; ok {
				k.eventKeyed(ctx, pod, string(pod.UID)+"/DeprecatedSimulatedLoad/"+old, corev1.EventTypeWarning, "DeprecatedSimulatedLoad", fmt.Sprintf("annotation %s is deprecated: rename it %s", old, ann))
				ann = old
			}
		}
		if !ok {
			return 100
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			k.event(ctx, pod, corev1.EventTypeWarning, "InvalidSimulatedLoad", fmt.Sprintf("annotation %s=%q is not a whole number of percent (e.g. \"180\"); the simulated load stays at 100%% of the requests", ann, v))
			return 100
		}
		return n
	}
	return read(CPUUtilizationAnnotation), read(MemoryUtilizationAnnotation)
}

// deprecatedUtilization are the load annotations' names before they took
// the emulator's prefix, still read (with a warning Event) when the new
// one is not set.
var deprecatedUtilization = map[string]string{
	CPUUtilizationAnnotation:    "winkube.dev/simulated-cpu-utilization",
	MemoryUtilizationAnnotation: "winkube.dev/simulated-memory-utilization",
}

func containerSpec(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// modelUsage is the model above for one container.
func modelUsage(c *corev1.Container, cpuPct, memPct, cpuCap uint64) usage {
	var u usage
	cpu := resourceMustParse(DefaultCPUUsage)
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && !q.IsZero() {
		cpu = q
	}
	u.cpuNano = uint64(cpu.MilliValue()) * 1_000_000 * cpuPct / 100
	limit := cpuCap
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok && !q.IsZero() {
		limit = uint64(q.MilliValue()) * 1_000_000
	}
	if limit > 0 && u.cpuNano > limit {
		u.cpuNano = limit
	}
	mem := resourceMustParse(DefaultMemoryUsage)
	if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok && !q.IsZero() {
		mem = q
	}
	u.memBytes = uint64(mem.Value()) * memPct / 100
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && !q.IsZero() {
		u.memLimit = uint64(q.Value())
		u.memBytes = min(u.memBytes, u.memLimit)
	}
	return u
}

// What each OS's stats provider fills in. Linux (cadvisor and the CRI
// stats provider on Linux) reports rss and major page faults and swap;
// Windows (the CRI stats provider on Windows, from hcsshim's statistics)
// reports the working set, available bytes, page faults and commit bytes
// as usageBytes, and no swap: pkg/kubelet/stats/cri_stats_provider_windows.go
// (makeWinContainerCPUAndMemoryStats, addCRIPodMemoryStats) in
// k8s.io/kubernetes v1.36.3, and the Summary types' "Stats pertaining to
// swap resources. This is reported to non-windows systems only."
// (k8s.io/kubelet v0.36.3 pkg/apis/stats/v1alpha1/types.go).
func (k *Kubelet) memoryStats(now metav1.Time, ws, limit uint64) (*statsapi.MemoryStats, *statsapi.SwapStats) {
	m := &statsapi.MemoryStats{Time: now, WorkingSetBytes: ptr.To(ws), UsageBytes: ptr.To(ws), PageFaults: ptr.To[uint64](0)}
	if limit > 0 {
		m.AvailableBytes = ptr.To(limit - ws)
	}
	if k.cfg.Host.OS == "windows" {
		return m, nil
	}
	m.RSSBytes, m.MajorPageFaults = ptr.To(ws), ptr.To[uint64](0)
	// Nodes run without swap (the kubelet's default failSwapOn and
	// memorySwap.swapBehavior NoSwap): none is used.
	return m, &statsapi.SwapStats{Time: now, SwapUsageBytes: ptr.To[uint64](0)}
}

func (k *Kubelet) podStats(pod *corev1.Pod, ctrs []usage, at time.Time) statsapi.PodStats {
	now := metav1.NewTime(at)
	ps := statsapi.PodStats{PodRef: statsapi.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)}}
	if pod.Status.StartTime != nil {
		ps.StartTime = *pod.Status.StartTime
	}
	var rate, total, mem, limit uint64
	limited := true
	for _, u := range ctrs {
		cs := statsapi.ContainerStats{
			Name: u.name, StartTime: metav1.NewTime(u.started),
			CPU: &statsapi.CPUStats{Time: now, UsageNanoCores: ptr.To(u.cpuNano), UsageCoreNanoSeconds: ptr.To(u.cpuTotal)},
			UserDefinedMetrics: []statsapi.UserDefinedMetric{{
				UserDefinedMetricDescriptor: statsapi.UserDefinedMetricDescriptor{
					Name: SimulatedMetric, Type: statsapi.MetricGauge, Units: "bool",
					Labels: map[string]string{"model": "requests-and-limits", "cpuUtilizationAnnotation": CPUUtilizationAnnotation},
				},
				Time: now, Value: 1,
			}},
		}
		cs.Memory, cs.Swap = k.memoryStats(now, u.memBytes, u.memLimit)
		ps.Containers = append(ps.Containers, cs)
		rate, total, mem, limit = rate+u.cpuNano, total+u.cpuTotal, mem+u.memBytes, limit+u.memLimit
		limited = limited && u.memLimit > 0
	}
	if !limited {
		limit = 0
	}
	ps.CPU = &statsapi.CPUStats{Time: now, UsageNanoCores: ptr.To(rate), UsageCoreNanoSeconds: ptr.To(total)}
	ps.Memory, ps.Swap = k.memoryStats(now, mem, limit)
	return ps
}

func (k *Kubelet) nodeStats(at time.Time, rate, total, mem uint64) statsapi.NodeStats {
	now := metav1.NewTime(at)
	n := statsapi.NodeStats{
		NodeName: k.cfg.NodeName, StartTime: metav1.NewTime(k.started),
		CPU: &statsapi.CPUStats{Time: now, UsageNanoCores: ptr.To(rate), UsageCoreNanoSeconds: ptr.To(total)},
	}
	capacity := uint64(0)
	if q, ok := k.cfg.Capacity[corev1.ResourceMemory]; ok {
		capacity = uint64(q.Value())
	}
	if capacity > 0 && mem > capacity {
		mem = capacity
	}
	n.Memory, n.Swap = k.memoryStats(now, mem, capacity)
	return n
}

// serveSummary is GET /stats/summary. Only the CPU and memory a simulated
// node can model are in it: no filesystem, network or rlimit stats, which
// the Summary types mark optional.
func (k *Kubelet) serveSummary(w http.ResponseWriter, r *http.Request) {
	s, err := k.summary(r.Context(), time.Now())
	if err != nil {
		// The kubelet's handleError (pkg/kubelet/server/stats/handler.go,
		// k8s.io/kubernetes v1.36.3).
		http.Error(w, fmt.Sprintf("Internal Error: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set(SimulatedHeader, "true")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}
