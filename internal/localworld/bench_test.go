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

// A local world keeps its Go memory under MemoryLimit, unless the user set
// GOMEMLIMIT, which wins.
func TestMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOMEMLIMIT")
	debug.SetMemoryLimit(math.MaxInt64)
	limitMemory()
	if got := debug.SetMemoryLimit(-1); got != MemoryLimit {
		t.Fatalf("memory limit = %d, want %d", got, MemoryLimit)
	}
	t.Setenv("GOMEMLIMIT", "3GiB")
	debug.SetMemoryLimit(3 << 30)
	limitMemory()
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Fatalf("memory limit = %d with GOMEMLIMIT=3GiB, want the user's %d", got, 3<<30)
	}
}
