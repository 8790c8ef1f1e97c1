package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
)

type benchOptions struct {
	bin, profile, output string
	sizes                []string
	steady               time.Duration
}

func newBenchCommand() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure winkube up: where the time, the requests, the CPU and the memory go",
		Long: `Run 'winkube up' in a scratch state directory for each size (control-plane +
Linux + Windows nodes) and report:
  - phases, in seconds from the start: management plane up, CNI applied,
    first control plane Ready, all nodes Ready (with the add-ons running),
    and the time to delete the cluster;
  - each worker's wait for the control plane (Machine created to its
    bootstrap data), provisioning (to the VM booting), join (to Node
    registered) and Ready (to Node Ready, with the CNI pod's steps) as
    p50/p90/p99;
  - ARM requests per machine, from the emulator's counters;
  - workload API-server requests per node per minute, from the
    apiserver_request_total metric of the control planes' API servers,
    during the bring-up and in a steady window after it (--steady);
  - CPU seconds of winkube, of the workload control planes' processes and
    of the management plane, and their memory.
Phase times come from the API objects' timestamps, which have whole
seconds. Machines here are noisy: compare runs by ratio, and note the load
average the report shows.`,
		Example: `  winkube bench
  winkube bench --size 1+1+2 --size 1+20+80 -o json
  winkube bench --size 1+20+80 --profile /tmp/prof   # then: go tool pprof /tmp/prof/cpu-1+20+80-up.pprof`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, o.output, "table", "json"); err != nil {
				return err
			}
			if o.steady < 0 {
				return badInputf(cmd, "--steady %s: want a duration of zero or more, such as 30s", o.steady)
			}
			for _, s := range o.sizes {
				n, err := parseSize(s)
				if err != nil {
					return badInputf(cmd, "--size %q: %v", s, err)
				}
				uo := &upOptions{flavor: flavors.Windows, version: benchVersion, windowsVersion: "2022", controlPlane: n[0], linux: n[1], windows: n[2], timeout: benchTimeout}
				if err := uo.check(cmd, "bench"); err != nil {
					return badInputf(cmd, "--size %q: %v", s, usageCause(err))
				}
			}
			ctrllog.SetLogger(logr.Discard())
			b, err := findBin(o.bin)
			if err != nil {
				return err
			}
			if o.profile != "" {
				if err := os.MkdirAll(o.profile, 0o755); err != nil {
					return err
				}
			}
			var reports []*benchReport
			for _, s := range o.sizes {
				r, err := o.run(cmd.Context(), cmd.ErrOrStderr(), b, s)
				if err != nil {
					return fmt.Errorf("size %s: %w", s, err)
				}
				reports = append(reports, r)
				if o.output == "table" {
					r.writeTable(cmd.OutOrStdout())
				}
			}
			if o.output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(reports)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.bin, "bin", "", "directory of the binaries hack/tools builds")
	cmd.Flags().StringSliceVar(&o.sizes, "size", []string{"1+1+2", "1+5+20"}, "cluster sizes as CONTROL-PLANE+LINUX+WINDOWS")
	cmd.Flags().StringVar(&o.profile, "profile", "", "directory to write winkube's CPU profiles (bring-up, steady window, delete) and heap profile (at Ready) to, per size")
	cmd.Flags().DurationVar(&o.steady, "steady", 30*time.Second, "how long to measure the running cluster after every node is Ready (0 skips it)")
	outputFlag(cmd, &o.output, "table", "table", "json")
	return cmd
}

// benchReport is one size's figures. Times are seconds.
type benchReport struct {
	Size        string `json:"size"`
	Nodes       int    `json:"nodes"`
	LoadAverage string `json:"loadAverage"`
	Phases      struct {
		ManagementPlaneUp      seconds `json:"managementPlaneUp"`
		CNIApplied             seconds `json:"cniApplied"`
		FirstControlPlaneReady seconds `json:"firstControlPlaneReady"`
		AllNodesReady          seconds `json:"allNodesReady"`
		Delete                 seconds `json:"delete"`
	} `json:"phases"`
	Workers struct {
		Count int `json:"count"`
		// WaitControlPlane is from the Machine's creation to its
		// bootstrap data: Cluster API holds workers until the control
		// plane is initialized.
		WaitControlPlane percentiles `json:"waitControlPlane"`
		Provisioning     percentiles `json:"provisioning"`
		Join             percentiles `json:"join"`
		// SeenProvisioned is how long after the VM booted Cluster API
		// recorded the Machine's infrastructure ready.
		SeenProvisioned percentiles `json:"seenProvisioned"`
		Ready           percentiles `json:"ready"`
		// The Ready step in parts: the CNI's DaemonSet pod created after
		// the Node, bound, run Ready; the Node Ready after it.
		CNIPodCreated   percentiles `json:"cniPodCreated"`
		CNIPodScheduled percentiles `json:"cniPodScheduled"`
		CNIPodReady     percentiles `json:"cniPodReady"`
		NodeReadyAfter  percentiles `json:"nodeReadyAfterCNIPod"`
	} `json:"workers"`
	// NodesReadyAt is when half, nine in ten and all of the nodes were
	// Ready, from the start: how the rate holds as nodes add up.
	NodesReadyAt struct {
		Half       seconds `json:"half"`
		NineTenths seconds `json:"nineTenths"`
		All        seconds `json:"all"`
	} `json:"nodesReadyAt"`
	ARM struct {
		Requests         int64    `json:"requests"`
		PerMachine       float64  `json:"perMachine"`
		DeletePerMachine float64  `json:"deletePerMachine"`
		Top              []counts `json:"top"`
	} `json:"arm"`
	APIServer struct {
		BringUpPerNodeMinute float64  `json:"bringUpPerNodeMinute"`
		SteadyPerNodeMinute  float64  `json:"steadyPerNodeMinute,omitempty"`
		SteadySeconds        float64  `json:"steadySeconds,omitempty"`
		Top                  []counts `json:"top"`
		// Error says why the requests could not be counted.
		Error string `json:"error,omitempty"`
	} `json:"apiServer"`
	// Management counts the management API server's requests during the
	// bring-up: Cluster API's and winkube's controllers at work.
	Management struct {
		Requests   float64  `json:"requests"`
		PerMachine float64  `json:"perMachine"`
		Top        []counts `json:"top"`
		Error      string   `json:"error,omitempty"`
	} `json:"management"`
	CPUSeconds struct {
		Winkube      cpuFigures `json:"winkube"`
		ControlPlane cpuFigures `json:"controlPlane"`
		Management   cpuFigures `json:"management"`
	} `json:"cpuSeconds"`
	MemoryMiB struct {
		WinkubePeak  int `json:"winkubePeak"`
		ControlPlane int `json:"controlPlane"`
		Management   int `json:"management"`
		// Where winkube's memory is once every node is Ready, after a
		// collection: its resident set, the Go heap's live objects, and
		// the goroutines' stacks (which no heap profile shows).
		WinkubeAtReady int `json:"winkubeAtReady"`
		GoHeapLive     int `json:"goHeapLive"`
		GoStacks       int `json:"goStacks"`
	} `json:"memoryMiB"`
	Goroutines int      `json:"goroutines"`
	Profiles   []string `json:"profiles,omitempty"`
}

type percentiles struct {
	P50 seconds `json:"p50"`
	P90 seconds `json:"p90"`
	P99 seconds `json:"p99"`
}

// seconds is a time in seconds; NaN (not measured) is null in JSON.
type seconds float64

func (s seconds) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(s)) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(float64(s), 'f', 3, 64)), nil
}

func (s *seconds) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = seconds(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*s = seconds(v)
	return err
}

// cpuFigures are CPU seconds used during the bring-up, per minute of the
// steady window, and during the delete.
type cpuFigures struct {
	BringUp         float64 `json:"bringUp"`
	SteadyPerMinute float64 `json:"steadyPerMinute,omitempty"`
	Delete          float64 `json:"delete,omitempty"`
}

type counts struct {
	What  string  `json:"what"`
	Count float64 `json:"count"`
}

func (o *benchOptions) run(ctx context.Context, errOut io.Writer, bin, size string) (*benchReport, error) {
	progress := progressPrinter(errOut)
	n, err := parseSize(size)
	if err != nil {
		return nil, err
	}
	r := &benchReport{Size: size, Nodes: int(n[0] + n[1] + n[2]), LoadAverage: loadAverage()}
	dir, err := os.MkdirTemp("", "winkube-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	prof := &profiler{dir: o.profile, size: size}
	defer prof.stop()
	self := os.Getpid()
	cpu0 := localworld.CPUTime(self)
	if err := prof.startCPU("up"); err != nil {
		return nil, err
	}
	start := time.Now()
	w, err := localworld.Start(ctx, localworld.Options{
		Name: "bench", Flavor: flavors.Windows, KubernetesVersion: benchVersion, ControlPlaneNodes: n[0], LinuxNodes: n[1], WindowsNodes: n[2],
		WindowsVersion: "2022", StateDir: dir, Bin: bin, Progress: progress,
	})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	r.Phases.ManagementPlaneUp = seconds(time.Since(start).Seconds())
	w.Emulator().ResetCounters()
	mgmtStart, mgmtErr := w.ManagementRequests(ctx)
	if err := w.CreateCluster(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, benchTimeout)
	defer cancel()
	if err := w.WaitReady(wctx); err != nil {
		return nil, err
	}
	ready := time.Now()
	r.Phases.AllNodesReady = seconds(ready.Sub(start).Seconds())
	prof.stopCPU()
	if err := prof.heap(); err != nil {
		return nil, err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.MemoryMiB.GoHeapLive, r.MemoryMiB.GoStacks = int(ms.HeapAlloc>>20), int(ms.StackInuse>>20)
	r.MemoryMiB.WinkubeAtReady = localworld.MemoryKB("VmRSS:", self) / 1024
	r.Goroutines = runtime.NumGoroutine()

	// What the bring-up cost.
	mgmt, machines := w.Processes()
	cpuUp := localworld.CPUTime(self)
	r.CPUSeconds.Winkube.BringUp = (cpuUp - cpu0).Seconds()
	cpUp, mgmtUp := localworld.CPUTime(machines...), localworld.CPUTime(mgmt...)
	r.CPUSeconds.ControlPlane.BringUp, r.CPUSeconds.Management.BringUp = cpUp.Seconds(), mgmtUp.Seconds()
	r.MemoryMiB.ControlPlane = localworld.MemoryKB("VmRSS:", machines...) / 1024
	r.MemoryMiB.Management = localworld.MemoryKB("VmRSS:", mgmt...) / 1024
	tl, err := w.Timeline(ctx)
	if err != nil {
		return nil, err
	}
	r.timeline(start, tl)
	arm := w.Emulator().Counters()
	r.ARM.Requests = total(arm)
	r.ARM.PerMachine = float64(r.ARM.Requests) / float64(r.Nodes)
	r.ARM.Top = top(toFloat(arm), 8)
	w.Emulator().ResetCounters()
	apiUp, err := w.APIRequests(ctx)
	if err != nil {
		r.APIServer.Error = err.Error()
	} else if minutes := ready.Sub(tl.ControlPlaneProvisioned).Minutes(); minutes > 0 && !tl.ControlPlaneProvisioned.IsZero() {
		r.APIServer.BringUpPerNodeMinute = sum(apiUp) / float64(r.Nodes) / minutes
		r.APIServer.Top = top(apiUp, 8)
	}

	if mgmtErr == nil {
		var now map[string]float64
		if now, mgmtErr = w.ManagementRequests(ctx); mgmtErr == nil {
			for k, v := range mgmtStart {
				now[k] -= v
			}
			r.Management.Requests = sum(now)
			r.Management.PerMachine = r.Management.Requests / float64(r.Nodes)
			r.Management.Top = top(now, 8)
		}
	}
	if mgmtErr != nil {
		r.Management.Error = mgmtErr.Error()
	}

	// What the running cluster costs, per minute.
	if o.steady > 0 {
		if err := prof.startCPU("steady"); err != nil {
			return nil, err
		}
		progress(fmt.Sprintf("measuring the running cluster for %s", o.steady))
		t0 := time.Now()
		select {
		case <-time.After(o.steady):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		prof.stopCPU()
		minutes := time.Since(t0).Minutes()
		r.CPUSeconds.Winkube.SteadyPerMinute = (localworld.CPUTime(self) - cpuUp).Seconds() / minutes
		r.CPUSeconds.ControlPlane.SteadyPerMinute = (localworld.CPUTime(machines...) - cpUp).Seconds() / minutes
		r.CPUSeconds.Management.SteadyPerMinute = (localworld.CPUTime(mgmt...) - mgmtUp).Seconds() / minutes
		if apiUp != nil {
			if after, err := w.APIRequests(ctx); err != nil {
				r.APIServer.Error = err.Error()
			} else {
				rate := map[string]float64{}
				for k, v := range after {
					if d := v - apiUp[k]; d > 0 {
						rate[k] = d / float64(r.Nodes) / minutes
					}
				}
				r.APIServer.SteadySeconds = o.steady.Seconds()
				r.APIServer.SteadyPerNodeMinute = sum(rate)
				r.APIServer.Top = top(rate, 8)
			}
		}
	}
	r.MemoryMiB.WinkubePeak = localworld.MemoryKB("VmHWM:", self) / 1024

	if err := prof.startCPU("delete"); err != nil {
		return nil, err
	}
	cpuDel := localworld.CPUTime(self)
	armDel := w.Emulator().Counters()
	del := time.Now()
	if err := w.DeleteCluster(ctx); err != nil {
		return nil, err
	}
	r.Phases.Delete = seconds(time.Since(del).Seconds())
	prof.stopCPU()
	r.CPUSeconds.Winkube.Delete = (localworld.CPUTime(self) - cpuDel).Seconds()
	r.ARM.DeletePerMachine = float64(total(w.Emulator().Counters())-total(armDel)) / float64(r.Nodes)
	r.Profiles = prof.written
	return r, nil
}

// timeline turns the cluster's timestamps into the report's phases.
func (r *benchReport) timeline(start time.Time, tl localworld.Timeline) {
	since := func(t time.Time) seconds {
		if t.IsZero() {
			return seconds(math.NaN())
		}
		return seconds(t.Sub(start).Seconds())
	}
	r.Phases.CNIApplied = since(tl.CNIApplied)
	r.Phases.FirstControlPlaneReady = since(tl.FirstControlPlaneReady)
	if k := len(tl.NodesReady); k > 0 {
		at := func(share float64) seconds { return since(tl.NodesReady[int(math.Ceil(share*float64(k)))-1]) }
		r.NodesReadyAt.Half, r.NodesReadyAt.NineTenths, r.NodesReadyAt.All = at(0.5), at(0.9), at(1)
	}
	var wait, prov, join, seen, ready, podCreated, podScheduled, podReady, nodeAfter []float64
	step := func(into *[]float64, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			*into = append(*into, to.Sub(from).Seconds())
		}
	}
	for _, w := range tl.Workers {
		step(&podCreated, w.NodeRegistered, w.CNIPodCreated)
		step(&podScheduled, w.CNIPodCreated, w.CNIPodScheduled)
		step(&podReady, w.CNIPodScheduled, w.CNIPodReady)
		step(&nodeAfter, w.CNIPodReady, w.NodeReady)
		step(&wait, w.Created, w.BootstrapReady)
		step(&prov, w.BootstrapReady, w.VMBooting)
		step(&join, w.VMBooting, w.NodeRegistered)
		step(&seen, w.VMBooting, w.Provisioned)
		step(&ready, w.NodeRegistered, w.NodeReady)
	}
	r.Workers.Count = len(tl.Workers)
	r.Workers.WaitControlPlane = percentilesOf(wait)
	r.Workers.CNIPodCreated, r.Workers.CNIPodScheduled = percentilesOf(podCreated), percentilesOf(podScheduled)
	r.Workers.CNIPodReady, r.Workers.NodeReadyAfter = percentilesOf(podReady), percentilesOf(nodeAfter)
	r.Workers.Provisioning, r.Workers.Join, r.Workers.Ready = percentilesOf(prov), percentilesOf(join), percentilesOf(ready)
	r.Workers.SeenProvisioned = percentilesOf(seen)
}

// percentilesOf takes the nearest-rank percentiles.
func percentilesOf(v []float64) percentiles {
	if len(v) == 0 {
		nan := seconds(math.NaN())
		return percentiles{nan, nan, nan}
	}
	sort.Float64s(v)
	p := func(q float64) seconds { return seconds(v[max(0, int(math.Ceil(q*float64(len(v))))-1)]) }
	return percentiles{P50: p(0.5), P90: p(0.9), P99: p(0.99)}
}

func total(c map[string]int64) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

func toFloat(c map[string]int64) map[string]float64 {
	out := make(map[string]float64, len(c))
	for k, v := range c {
		out[k] = float64(v)
	}
	return out
}

func sum(c map[string]float64) float64 {
	var n float64
	for _, v := range c {
		n += v
	}
	return n
}

// top is the n largest counts, largest first.
func top(c map[string]float64, n int) []counts {
	out := make([]counts, 0, len(c))
	for k, v := range c {
		out = append(out, counts{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].What < out[j].What
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func (r *benchReport) writeTable(out io.Writer) {
	t := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	f := func(v seconds) string {
		if math.IsNaN(float64(v)) {
			return "-"
		}
		return strconv.FormatFloat(float64(v), 'f', 1, 64)
	}
	g := func(v float64) string { return f(seconds(v)) }
	fmt.Fprintf(t, "size %s (%d nodes), load average at start %s\n", r.Size, r.Nodes, r.LoadAverage)
	fmt.Fprintf(t, "PHASE\tSECONDS FROM START\n")
	fmt.Fprintf(t, "management plane up\t%s\n", f(r.Phases.ManagementPlaneUp))
	fmt.Fprintf(t, "CNI applied\t%s\n", f(r.Phases.CNIApplied))
	fmt.Fprintf(t, "first control plane Ready\t%s\n", f(r.Phases.FirstControlPlaneReady))
	fmt.Fprintf(t, "half / 90%% / all nodes Ready\t%s / %s / %s\n", f(r.NodesReadyAt.Half), f(r.NodesReadyAt.NineTenths), f(r.NodesReadyAt.All))
	fmt.Fprintf(t, "all nodes Ready, add-ons running\t%s\n", f(r.Phases.AllNodesReady))
	fmt.Fprintf(t, "delete (seconds it took)\t%s\n", f(r.Phases.Delete))
	fmt.Fprintf(t, "\nWORKERS (%d), SECONDS\tP50\tP90\tP99\n", r.Workers.Count)
	for _, row := range []struct {
		name string
		p    percentiles
	}{
		{"wait for the control plane (Machine to bootstrap data)", r.Workers.WaitControlPlane},
		{"provisioning (bootstrap data to VM booting)", r.Workers.Provisioning},
		{"join (VM booting to Node registered)", r.Workers.Join},
		{"  Cluster API sees the VM (VM booting to InfrastructureReady)", r.Workers.SeenProvisioned},
		{"Ready (Node registered to Ready)", r.Workers.Ready},
		{"  CNI pod created (Node registered to pod)", r.Workers.CNIPodCreated},
		{"  CNI pod scheduled (pod to bound)", r.Workers.CNIPodScheduled},
		{"  CNI pod Ready (bound to Ready)", r.Workers.CNIPodReady},
		{"  Node Ready (CNI pod Ready to Node Ready)", r.Workers.NodeReadyAfter},
	} {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", row.name, f(row.p.P50), f(row.p.P90), f(row.p.P99))
	}
	fmt.Fprintf(t, "\nREQUESTS\t\n")
	fmt.Fprintf(t, "ARM per machine, bring-up / delete\t%s / %s (%d in all)\n", g(r.ARM.PerMachine), g(r.ARM.DeletePerMachine), r.ARM.Requests)
	for _, c := range r.ARM.Top {
		fmt.Fprintf(t, "  %s\t%.0f\n", c.What, c.Count)
	}
	if r.APIServer.Error != "" {
		fmt.Fprintf(t, "workload API server\tnot counted: %s\n", r.APIServer.Error)
	} else {
		fmt.Fprintf(t, "workload API server per node per minute, bring-up / steady\t%s / %s\n", g(r.APIServer.BringUpPerNodeMinute), g(r.APIServer.SteadyPerNodeMinute))
		for _, c := range r.APIServer.Top {
			fmt.Fprintf(t, "  %s\t%s\n", c.What, strconv.FormatFloat(c.Count, 'f', 2, 64))
		}
	}
	if r.Management.Error != "" {
		fmt.Fprintf(t, "management API server\tnot counted: %s\n", r.Management.Error)
	} else {
		fmt.Fprintf(t, "management API server per machine, bring-up\t%s (%.0f in all)\n", g(r.Management.PerMachine), r.Management.Requests)
		for _, c := range r.Management.Top {
			fmt.Fprintf(t, "  %s\t%.0f\n", c.What, c.Count)
		}
	}
	fmt.Fprintf(t, "\nCPU SECONDS\tBRING-UP\tSTEADY PER MINUTE\tDELETE\n")
	fmt.Fprintf(t, "winkube\t%s\t%s\t%s\n", g(r.CPUSeconds.Winkube.BringUp), g(r.CPUSeconds.Winkube.SteadyPerMinute), g(r.CPUSeconds.Winkube.Delete))
	fmt.Fprintf(t, "workload control planes\t%s\t%s\t-\n", g(r.CPUSeconds.ControlPlane.BringUp), g(r.CPUSeconds.ControlPlane.SteadyPerMinute))
	fmt.Fprintf(t, "management plane\t%s\t%s\t-\n", g(r.CPUSeconds.Management.BringUp), g(r.CPUSeconds.Management.SteadyPerMinute))
	fmt.Fprintf(t, "\nMEMORY MIB\t\n")
	fmt.Fprintf(t, "winkube peak\t%d\n", r.MemoryMiB.WinkubePeak)
	fmt.Fprintf(t, "winkube at Ready: resident / Go heap live / goroutine stacks\t%d / %d / %d (%d goroutines)\n",
		r.MemoryMiB.WinkubeAtReady, r.MemoryMiB.GoHeapLive, r.MemoryMiB.GoStacks, r.Goroutines)
	fmt.Fprintf(t, "workload control planes at Ready\t%d\n", r.MemoryMiB.ControlPlane)
	fmt.Fprintf(t, "management plane at Ready\t%d\n", r.MemoryMiB.Management)
	for _, p := range r.Profiles {
		fmt.Fprintf(t, "profile\t%s\n", p)
	}
	fmt.Fprintln(t)
	_ = t.Flush()
}

// profiler writes winkube's CPU profile per phase and a heap profile, when
// it has a directory.
type profiler struct {
	dir, size string
	cpu       *os.File
	written   []string
}

func (p *profiler) path(kind string) string {
	return filepath.Join(p.dir, kind+"-"+p.size+".pprof")
}

func (p *profiler) startCPU(phase string) error {
	if p.dir == "" {
		return nil
	}
	f, err := os.Create(p.path("cpu-" + phase))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("CPU profile: %w", err)
	}
	p.cpu = f
	return nil
}

func (p *profiler) stopCPU() {
	if p.cpu == nil {
		return
	}
	pprof.StopCPUProfile()
	_ = p.cpu.Close()
	p.written = append(p.written, p.cpu.Name())
	p.cpu = nil
}

// heap writes the live heap after a collection.
func (p *profiler) heap() error {
	if p.dir == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(p.path("heap"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return err
	}
	p.written = append(p.written, f.Name())
	return nil
}

func (p *profiler) stop() { p.stopCPU() }

const (
	benchVersion = "v1.36.3"
	benchTimeout = 20 * time.Minute
)

// parseSize reads CONTROL-PLANE+LINUX+WINDOWS.
func parseSize(size string) ([3]int32, error) {
	var n [3]int32
	parts := strings.Split(size, "+")
	if len(parts) != 3 {
		return n, fmt.Errorf("want CONTROL-PLANE+LINUX+WINDOWS, like 1+1+2")
	}
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return n, fmt.Errorf("%q is not a node count", p)
		}
		n[i] = int32(v)
	}
	return n, nil
}
