package localworld

import (
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

// The request counts read from a kube-apiserver's /metrics: summed over
// codes, components and scopes, keyed by verb and resource.
func TestAddRequestTotals(t *testing.T) {
	metrics := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="LIST",version="v1"} 1.5e+01
apiserver_request_duration_seconds_bucket{verb="PUT",le="0.1"} 99
`
	out := map[string]float64{}
	if err := addRequestTotals(strings.NewReader(metrics), out); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"PUT leases": 42, "PATCH pods/status": 7, "GET /healthz": 3, "LIST nodes": 15}
	if len(out) != len(want) {
		t.Fatalf("got %v, want %v", out, want)
	}
	for k, v := range want {
		if out[k] != v {
			t.Fatalf("%s: got %v, want %v (all: %v)", k, out[k], v, out)
		}
	}
}

func TestPromLabelsEscapes(t *testing.T) {
	got := promLabels(`a="x",b="say \"hi\"",c=""`)
	if got["a"] != "x" || got["b"] != `say "hi"` || got["c"] != "" || len(got) != 3 {
		t.Fatalf("%q", got)
	}
}

// This process's own CPU time and memory, from /proc.
func TestCPUTimeAndMemoryOfThisProcess(t *testing.T) {
	before := CPUTime(os.Getpid())
	x := 0
	for i := 0; CPUTime(os.Getpid()) == before; i++ {
		x += i % 7
	}
	_ = x
	if MemoryKB("VmRSS:", os.Getpid()) == 0 || MemoryKB("VmHWM:", os.Getpid()) == 0 {
		t.Fatal("no resident memory read for this process")
	}
	if CPUTime(1<<30) != 0 {
		t.Fatal("a process that does not exist used CPU")
	}
}

// A local world's soft memory limit grows with its nodes (4 MiB each over
// 512 MiB, never under MemoryLimit), is capped at half the machine's
// memory, and GOMEMLIMIT, when the user sets it, wins.
func TestMemoryLimit(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	for _, c := range []struct {
		nodes, total, want int64
	}{
		{nodes: 4, total: 24 * gib, want: MemoryLimit},
		{nodes: 101, total: 24 * gib, want: 916 * mib},
		{nodes: 501, total: 24 * gib, want: 2516 * mib},
		{nodes: 1001, total: 24 * gib, want: 4516 * mib},
		{nodes: 1001, total: 4 * gib, want: 2 * gib},
		{nodes: 1001, total: gib, want: MemoryLimit},
		{nodes: 501, total: 0, want: 2516 * mib},
	} {
		if got := memoryLimit(c.nodes, c.total); got != c.want {
			t.Errorf("memoryLimit(%d nodes, %d MiB of memory) = %d MiB, want %d MiB", c.nodes, c.total/mib, got/mib, c.want/mib)
		}
	}
	if machineMemory() <= 0 {
		t.Error("no MemTotal read from /proc/meminfo")
	}

	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOMEMLIMIT")
	debug.SetMemoryLimit(math.MaxInt64)
	world := Options{ControlPlaneNodes: 1, LinuxNodes: 100, WindowsNodes: 400}
	limitMemory(world)
	if got, want := debug.SetMemoryLimit(-1), memoryLimit(501, machineMemory()); got != want || got <= MemoryLimit {
		t.Fatalf("memory limit of a 501-node world = %d MiB, want %d MiB (more than %d MiB)", got>>20, want>>20, MemoryLimit>>20)
	}
	t.Setenv("GOMEMLIMIT", "3GiB")
	debug.SetMemoryLimit(3 << 30)
	limitMemory(world)
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Fatalf("memory limit = %d with GOMEMLIMIT=3GiB, want the user's %d", got, 3<<30)
	}
}
