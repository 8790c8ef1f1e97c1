package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/apicallers"
	"github.com/winkube/winkube/internal/localworld/bringup"
)

// TestPercentilesOf: nearest rank, so a p99 of fewer than a hundred
// samples is the largest, and nothing measured is NaN (null in JSON).
func TestPercentilesOf(t *testing.T) {
	ten := []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
	for _, c := range []struct {
		in            []float64
		p50, p90, p99 float64
	}{
		{[]float64{4}, 4, 4, 4},
		{[]float64{3, 1, 2}, 2, 3, 3},
		{ten, 5, 9, 10},
	} {
		got := PercentilesOf(append([]float64(nil), c.in...))
		if float64(got.P50) != c.p50 || float64(got.P90) != c.p90 || float64(got.P99) != c.p99 {
			t.Errorf("%v: %+v, want %v/%v/%v", c.in, got, c.p50, c.p90, c.p99)
		}
	}
	none := PercentilesOf(nil)
	if !math.IsNaN(float64(none.P50)) || !math.IsNaN(float64(none.P99)) {
		t.Errorf("no samples: %+v, want NaN", none)
	}
	b, err := json.Marshal(none)
	if err != nil || string(b) != `{"p50":null,"p90":null,"p99":null}` {
		t.Errorf("no samples in JSON: %s (%v)", b, err)
	}
}

// TestSecondsJSON: three decimals out, null both ways.
func TestSecondsJSON(t *testing.T) {
	b, err := json.Marshal([]Seconds{1.23456, Seconds(math.NaN())})
	if err != nil || string(b) != "[1.235,null]" {
		t.Fatalf("marshal: %s (%v)", b, err)
	}
	var back []Seconds
	if err := json.Unmarshal(b, &back); err != nil || back[0] != 1.235 || !math.IsNaN(float64(back[1])) {
		t.Fatalf("unmarshal: %v (%v)", back, err)
	}
	var s Seconds
	if err := json.Unmarshal([]byte(`"x"`), &s); err == nil {
		t.Error("a string read as seconds")
	}
}

// TestTopAndSums: the largest first, ties by name, cut at n.
func TestTopAndSums(t *testing.T) {
	c := map[string]int64{"PUT vm": 5, "GET vm": 9, "GET nic": 5, "DELETE vm": 1}
	if Total(c) != 20 || Sum(ToFloat(c)) != 20 {
		t.Fatalf("total %d, sum %v, want 20", Total(c), Sum(ToFloat(c)))
	}
	got := Top(ToFloat(c), 3)
	want := []Counts{{"GET vm", 9}, {"GET nic", 5}, {"PUT vm", 5}}
	if len(got) != len(want) {
		t.Fatalf("top 3: %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("top 3: %v, want %v", got, want)
			break
		}
	}
}

// TestParseSize refuses what is not CONTROL-PLANE+LINUX+WINDOWS.
func TestParseSize(t *testing.T) {
	if n, err := ParseSize("1+20+80"); err != nil || n != [3]int32{1, 20, 80} {
		t.Fatalf("1+20+80: %v %v", n, err)
	}
	for _, bad := range []string{"", "1+2", "1+2+3+4", "1+x+2", "1+-1+2", "1 + 1 + 2"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestTimeline: a cluster's timestamps as the report's phases: steps
// with a missing end are left out, not counted as zero, and the share of
// nodes Ready is read by nearest rank.
func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tl := bringup.Timeline{
		CNIApplied: at(30), FirstControlPlaneReady: at(90),
		// Its VM booting not seen (the machine runtime's note lost).
		FirstControlPlane: bringup.ControlPlaneTimes{Created: at(12), NodeRegistered: at(24), Initialized: at(35)},
		NodesReady:        []time.Time{at(90), at(150), at(160), at(200)},
		Workers: []bringup.WorkerTimes{
			{Created: at(10), BootstrapReady: at(95), VMBooting: at(105), Provisioned: at(107), NodeRegistered: at(120), NodeReady: at(150),
				CNIPodCreated: at(121), CNIPodScheduled: at(122), CNIPodReady: at(140)},
			{Created: at(10), BootstrapReady: at(95), VMBooting: at(115), NodeRegistered: at(140), NodeReady: at(160)},
			// Still joining: no Node yet.
			{Created: at(10), BootstrapReady: at(95), VMBooting: at(125)},
		},
	}
	var r Report
	r.Timeline(t0, tl)
	if r.Phases.CNIApplied != 30 || r.Phases.FirstControlPlaneReady != 90 {
		t.Errorf("phases %+v", r.Phases)
	}
	if p := r.Phases; p.ControlPlaneMachine != 12 || !math.IsNaN(float64(p.ControlPlaneVMBooting)) || p.ControlPlaneNodeRegistered != 24 || p.ControlPlaneInitialized != 35 {
		t.Errorf("first control plane %+v, want 12, NaN, 24, 35", p)
	}
	if r.NodesReadyAt.Half != 150 || r.NodesReadyAt.NineTenths != 200 || r.NodesReadyAt.All != 200 {
		t.Errorf("nodes Ready at %+v, want 150/200/200", r.NodesReadyAt)
	}
	if r.Workers.Count != 3 || r.Workers.WaitControlPlane.P50 != 85 {
		t.Errorf("workers %d, wait %+v", r.Workers.Count, r.Workers.WaitControlPlane)
	}
	// Join: 15 and 25 seconds; the third has not joined.
	if r.Workers.Join.P50 != 15 || r.Workers.Join.P99 != 25 {
		t.Errorf("join %+v, want p50 15, p99 25", r.Workers.Join)
	}
	if r.Workers.SeenProvisioned.P50 != 2 || r.Workers.SeenProvisioned.P99 != 2 {
		t.Errorf("seen provisioned %+v, want 2 (one sample)", r.Workers.SeenProvisioned)
	}
	if r.Workers.CNIPodReady.P50 != 18 || r.Workers.NodeReadyAfter.P50 != 10 {
		t.Errorf("CNI pod Ready %+v, Node after %+v", r.Workers.CNIPodReady, r.Workers.NodeReadyAfter)
	}
	var empty Report
	empty.Timeline(t0, bringup.Timeline{})
	if !math.IsNaN(float64(empty.Phases.CNIApplied)) || !math.IsNaN(float64(empty.Workers.Ready.P50)) {
		t.Errorf("an empty timeline: %+v", empty)
	}
}

// TestWriteTable: a figure not measured prints as "-", a counting error
// says why.
func TestWriteTable(t *testing.T) {
	r := Report{Size: "1+1+2", Nodes: 4, LoadAverage: "0.50 0.40 0.30"}
	r.Timeline(time.Now(), bringup.Timeline{})
	r.Phases.AllNodesReady = 61.25
	r.Phases.ControlPlaneInitialized = 35
	r.APIServer.Error = "no metrics"
	r.ARM.Top = []Counts{{"PUT virtualMachines", 4}}
	var b bytes.Buffer
	r.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"size 1+1+2 (4 nodes), load average at start 0.50 0.40 0.30", "CNI applied", "not counted: no metrics", "PUT virtualMachines", "WORKERS (0)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The columns' width follows the longest label.
	for _, want := range []string{`add-ons running +61\.2\n`, `Cluster API reached it \(load balancer, cluster cache\) +35\.0\n`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "first control plane Ready") || !strings.Contains(strings.SplitN(out[strings.Index(out, "CNI applied"):], "\n", 2)[0], "-") {
		t.Errorf("a phase not measured is not \"-\":\n%s", out)
	}
}

// TestProfiler: CPU profiles per phase and the heap, named for the size;
// none without a directory.
func TestProfiler(t *testing.T) {
	dir := t.TempDir()
	p := NewProfiler(dir, "1+1+2")
	if err := p.StartCPU("up"); err != nil {
		t.Fatal(err)
	}
	p.StopCPU()
	p.StopCPU() // twice is harmless, as Stop after the last phase
	if err := p.Heap(); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	want := []string{filepath.Join(dir, "cpu-up-1+1+2.pprof"), filepath.Join(dir, "heap-1+1+2.pprof")}
	if got := p.Written(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("written %v, want %v", got, want)
	}
	for _, f := range want {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	off := NewProfiler("", "1+1+2")
	if err := off.StartCPU("up"); err != nil {
		t.Fatal(err)
	}
	off.Stop()
	if err := off.Heap(); err != nil || len(off.Written()) != 0 {
		t.Errorf("without a directory: %v, %v", off.Written(), err)
	}
}

func TestCallersAttributeTheBringUpsRequests(t *testing.T) {
	before := map[apicallers.Key]float64{{Controller: "machine", Request: "PATCH machines/status"}: 10}
	after := map[apicallers.Key]float64{
		{Controller: "machine", Request: "PATCH machines/status"}:           50,
		{Controller: "azuremachine", Request: "PATCH azuremachines/status"}: 20,
		{Controller: "kubeadmconfig", Request: "GET secrets"}:               4,
		{Controller: "", Request: "WATCH machines"}:                         2,
	}
	byCaller, byController := Callers(before, after, 100, 2)
	want := map[string]float64{
		"Cluster API core": 20, "winkube controllers": 10, "kubeadm bootstrap": 2,
		"manager outside a reconcile (caches, webhooks)": 1, "outside the manager (local world, API server)": 17,
	}
	if len(byCaller) != len(want) {
		t.Fatalf("by caller %v, want %v", byCaller, want)
	}
	for _, c := range byCaller {
		if want[c.What] != c.Count {
			t.Errorf("%s: %v per machine, want %v", c.What, c.Count, want[c.What])
		}
	}
	if byController[0] != (Counts{"machine: PATCH machines/status", 20}) {
		t.Errorf("largest line %v, want the Machine controller's status patches, 20 per machine", byController[0])
	}
}
