package cli

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/bench"
	"github.com/winkube/winkube/internal/testenv"
)

// TestBenchReports runs `winkube bench` on the smallest mixed cluster and
// reads its JSON report: every phase measured, in the order a bring-up
// goes, the requests counted where they were served, the CPU and memory
// read from /proc, and pprof profiles written.
func TestBenchReports(t *testing.T) {
	testenv.SkipIfShort(t, "a booted local world (winkube bench)")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	prof := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, errOut, err := winkube(ctx, "bench", "--bin", bin, "--size", "1+0+1", "--steady", "15s", "--profile", prof, "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var reports []bench.Report
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, out)
	}
	if len(reports) != 1 || reports[0].Size != "1+0+1" || reports[0].Nodes != 2 {
		t.Fatalf("reports %+v, want one of size 1+0+1 with 2 nodes", reports)
	}
	r := reports[0]
	measured := func(what string, v bench.Seconds) float64 {
		t.Helper()
		if math.IsNaN(float64(v)) || v < 0 {
			t.Fatalf("%s not measured: %v\n%s", what, v, out)
		}
		return float64(v)
	}
	up := measured("management plane up", r.Phases.ManagementPlaneUp)
	cni := measured("CNI applied", r.Phases.CNIApplied)
	cp := measured("first control plane Ready", r.Phases.FirstControlPlaneReady)
	all := measured("all nodes Ready", r.Phases.AllNodesReady)
	measured("delete", r.Phases.Delete)
	// Causal order: the workload cluster exists once the management plane
	// runs; a node is Ready only once the CNI runs on it.
	if !(up < cni && cni <= cp+1 && cp <= all && float64(r.NodesReadyAt.All) <= all) {
		t.Fatalf("phases out of causal order: up %.1f, CNI %.1f, first control plane %.1f, all %.1f (last node %.1f)", up, cni, cp, all, r.NodesReadyAt.All)
	}
	if r.Workers.Count != 1 {
		t.Fatalf("%d workers, want 1", r.Workers.Count)
	}
	// A step between a precise time and an API timestamp (whole seconds)
	// can come out a fraction of a second below zero.
	for name, p := range map[string]bench.Percentiles{"wait": r.Workers.WaitControlPlane, "provisioning": r.Workers.Provisioning, "join": r.Workers.Join, "ready": r.Workers.Ready, "CNI pod Ready": r.Workers.CNIPodReady} {
		if math.IsNaN(float64(p.P99)) || p.P99 < -1 {
			t.Fatalf("worker step %s not measured: %+v\n%s", name, p, out)
		}
	}
	if r.ARM.PerMachine <= 0 || len(r.ARM.Top) == 0 || r.ARM.DeletePerMachine <= 0 {
		t.Fatalf("ARM requests not counted: %+v", r.ARM)
	}
	if r.APIServer.Error != "" || r.APIServer.BringUpPerNodeMinute <= 0 || r.APIServer.SteadyPerNodeMinute <= 0 {
		t.Fatalf("workload API requests not counted: %+v", r.APIServer)
	}
	// Kubelets renew their leases while the cluster runs.
	leases := false
	for _, c := range r.APIServer.Top {
		leases = leases || c.What == "PUT leases"
	}
	if !leases {
		t.Fatalf("the steady window's top requests have no lease renewals: %+v", r.APIServer.Top)
	}
	if r.CPUSeconds.Winkube.BringUp <= 0 || r.CPUSeconds.ControlPlane.BringUp <= 0 || r.CPUSeconds.Management.BringUp <= 0 {
		t.Fatalf("CPU not read: %+v", r.CPUSeconds)
	}
	if r.MemoryMiB.WinkubePeak <= 0 || r.MemoryMiB.ControlPlane <= 0 || r.MemoryMiB.Management <= 0 ||
		r.MemoryMiB.WinkubeAtReady <= 0 || r.MemoryMiB.GoHeapLive <= 0 || r.MemoryMiB.GoStacks <= 0 || r.MemoryMiB.WinkubeAtReady > r.MemoryMiB.WinkubePeak {
		t.Fatalf("memory not read: %+v", r.MemoryMiB)
	}
	// A world of two machines runs kubelets, informers and listeners:
	// far more than the command's own few goroutines.
	if r.Goroutines < 50 {
		t.Fatalf("goroutines at Ready = %d, want the world's (at least 50)", r.Goroutines)
	}
	want := []string{"cpu-up-1+0+1.pprof", "heap-1+0+1.pprof", "cpu-steady-1+0+1.pprof", "cpu-delete-1+0+1.pprof"}
	if len(r.Profiles) != len(want) {
		t.Fatalf("profiles %v, want %v", r.Profiles, want)
	}
	for _, name := range want {
		readProfile(t, filepath.Join(prof, name))
	}
}

// readProfile checks a file is a pprof profile: gzipped protocol buffers.
func readProfile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s is not a pprof profile: %v", path, err)
	}
	b, err := io.ReadAll(z)
	if err != nil || len(b) == 0 {
		t.Fatalf("%s is not a pprof profile: %v (%d bytes)", path, err, len(b))
	}
	if strings.HasPrefix(string(b), "{") {
		t.Fatalf("%s holds JSON, not a profile", path)
	}
}
