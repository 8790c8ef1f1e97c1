// Package bench is what `winkube bench` reports of a world's bring-up:
// the report's figures, the phases and percentiles derived from the
// cluster's timeline, request and CPU counts, its table, and the pprof
// profiles it writes, and the state a failed run keeps. Package
// bench/measure runs the world and fills it in.
package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/winkube/winkube/internal/apicallers"
	"github.com/winkube/winkube/internal/localworld/bringup"
)

// Report is one size's figures: what `winkube bench` prints as a table or
// JSON. Times are seconds.
type Report struct {
	Size        string `json:"size"`
	Nodes       int    `json:"nodes"`
	LoadAverage string `json:"LoadAverage"`
	Phases      struct {
		ManagementPlaneUp Seconds `json:"managementPlaneUp"`
		// The first control plane's steps (bringup.ControlPlaneTimes).
		ControlPlaneMachine        Seconds `json:"controlPlaneMachine"`
		ControlPlaneVMBooting      Seconds `json:"controlPlaneVMBooting"`
		ControlPlaneNodeRegistered Seconds `json:"controlPlaneNodeRegistered"`
		ControlPlaneInitialized    Seconds `json:"controlPlaneInitialized"`
		CNIApplied                 Seconds `json:"cniApplied"`
		FirstControlPlaneReady     Seconds `json:"firstControlPlaneReady"`
		AllNodesReady              Seconds `json:"allNodesReady"`
		Delete                     Seconds `json:"delete"`
	} `json:"phases"`
	Workers struct {
		Count int `json:"count"`
		// WaitControlPlane is from the Machine's creation to its
		// bootstrap data: Cluster API holds workers until the control
		// plane is initialized.
		WaitControlPlane Percentiles `json:"waitControlPlane"`
		Provisioning     Percentiles `json:"provisioning"`
		Join             Percentiles `json:"join"`
		// SeenProvisioned is how long after the VM booted Cluster API
		// recorded the Machine's infrastructure ready.
		SeenProvisioned Percentiles `json:"seenProvisioned"`
		Ready           Percentiles `json:"ready"`
		// The Ready step in parts: the CNI's DaemonSet pod created after
		// the Node, bound, run Ready; the Node Ready after it.
		CNIPodCreated   Percentiles `json:"cniPodCreated"`
		CNIPodScheduled Percentiles `json:"cniPodScheduled"`
		CNIPodReady     Percentiles `json:"cniPodReady"`
		NodeReadyAfter  Percentiles `json:"nodeReadyAfterCNIPod"`
	} `json:"workers"`
	// NodesReadyAt is when half, nine in ten and all of the nodes were
	// Ready, from the start: how the rate holds as nodes add up.
	NodesReadyAt struct {
		Half       Seconds `json:"half"`
		NineTenths Seconds `json:"nineTenths"`
		All        Seconds `json:"all"`
	} `json:"nodesReadyAt"`
	ARM struct {
		Requests         int64    `json:"requests"`
		PerMachine       float64  `json:"perMachine"`
		DeletePerMachine float64  `json:"deletePerMachine"`
		Top              []Counts `json:"top"`
	} `json:"arm"`
	APIServer struct {
		BringUpPerNodeMinute float64  `json:"bringUpPerNodeMinute"`
		SteadyPerNodeMinute  float64  `json:"steadyPerNodeMinute,omitempty"`
		SteadySeconds        float64  `json:"steadySeconds,omitempty"`
		Top                  []Counts `json:"top"`
		// Error says why the requests could not be counted.
		Error string `json:"error,omitempty"`
	} `json:"apiServer"`
	// Management Counts the management API server's requests during the
	// bring-up: Cluster API's and winkube's controllers at work.
	Management struct {
		Requests   float64  `json:"requests"`
		PerMachine float64  `json:"perMachine"`
		Top        []Counts `json:"top"`
		// ByCaller is the requests per machine by who made them: winkube's
		// controllers, Cluster API's, the kubeadm bootstrap provider,
		// KubeadmControlPlane, the manager outside a reconcile (its
		// caches, its webhooks) and the rest (the local world's own
		// clients, the API server's own).
		ByCaller []Counts `json:"byCaller,omitempty"`
		// ByController is the largest lines per machine as
		// "controller: VERB resource".
		ByController []Counts `json:"byController,omitempty"`
		Error        string   `json:"error,omitempty"`
	} `json:"management"`
	CPUSeconds struct {
		Winkube      CPUFigures `json:"winkube"`
		ControlPlane CPUFigures `json:"controlPlane"`
		Management   CPUFigures `json:"management"`
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

type Percentiles struct {
	P50 Seconds `json:"p50"`
	P90 Seconds `json:"p90"`
	P99 Seconds `json:"p99"`
}

// Seconds is a time in seconds; NaN (not measured) is null in JSON.
type Seconds float64

func (s Seconds) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(s)) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(float64(s), 'f', 3, 64)), nil
}

func (s *Seconds) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = Seconds(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*s = Seconds(v)
	return err
}

// CPUFigures are CPU seconds used during the bring-up, per minute of the
// steady window, and during the delete.
type CPUFigures struct {
	BringUp         float64 `json:"bringUp"`
	SteadyPerMinute float64 `json:"steadyPerMinute,omitempty"`
	Delete          float64 `json:"delete,omitempty"`
}

type Counts struct {
	What  string  `json:"what"`
	Count float64 `json:"count"`
}

// Timeline turns the cluster's timestamps into the report's phases.
func (r *Report) Timeline(start time.Time, tl bringup.Timeline) {
	since := func(t time.Time) Seconds {
		if t.IsZero() {
			return Seconds(math.NaN())
		}
		return Seconds(t.Sub(start).Seconds())
	}
	cp := tl.FirstControlPlane
	r.Phases.ControlPlaneMachine, r.Phases.ControlPlaneVMBooting = since(cp.Created), since(cp.VMBooting)
	r.Phases.ControlPlaneNodeRegistered, r.Phases.ControlPlaneInitialized = since(cp.NodeRegistered), since(cp.Initialized)
	r.Phases.CNIApplied = since(tl.CNIApplied)
	r.Phases.FirstControlPlaneReady = since(tl.FirstControlPlaneReady)
	if k := len(tl.NodesReady); k > 0 {
		at := func(share float64) Seconds { return since(tl.NodesReady[int(math.Ceil(share*float64(k)))-1]) }
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
	r.Workers.WaitControlPlane = PercentilesOf(wait)
	r.Workers.CNIPodCreated, r.Workers.CNIPodScheduled = PercentilesOf(podCreated), PercentilesOf(podScheduled)
	r.Workers.CNIPodReady, r.Workers.NodeReadyAfter = PercentilesOf(podReady), PercentilesOf(nodeAfter)
	r.Workers.Provisioning, r.Workers.Join, r.Workers.Ready = PercentilesOf(prov), PercentilesOf(join), PercentilesOf(ready)
	r.Workers.SeenProvisioned = PercentilesOf(seen)
}

// PercentilesOf takes the nearest-rank percentiles (p50, p90, p99); NaN
// for none. It sorts v.
func PercentilesOf(v []float64) Percentiles {
	if len(v) == 0 {
		nan := Seconds(math.NaN())
		return Percentiles{nan, nan, nan}
	}
	sort.Float64s(v)
	p := func(q float64) Seconds { return Seconds(v[max(0, int(math.Ceil(q*float64(len(v))))-1)]) }
	return Percentiles{P50: p(0.5), P90: p(0.9), P99: p(0.99)}
}

// Total adds the counts up.
func Total(c map[string]int64) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// ToFloat is c as floats, for Top.
func ToFloat(c map[string]int64) map[string]float64 {
	out := make(map[string]float64, len(c))
	for k, v := range c {
		out[k] = float64(v)
	}
	return out
}

// Sum adds the figures up.
func Sum(c map[string]float64) float64 {
	var n float64
	for _, v := range c {
		n += v
	}
	return n
}

// Top is the n largest counts, largest first, ties by name.
func Top(c map[string]float64, n int) []Counts {
	out := make([]Counts, 0, len(c))
	for k, v := range c {
		out = append(out, Counts{k, v})
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

// LoadAverage is the machine's 1, 5 and 15 minute load averages, "" where
// /proc has none.
func LoadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// WriteTable prints the report as aligned tables; a figure not measured is "-".
func (r *Report) WriteTable(out io.Writer) {
	t := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	f := func(v Seconds) string {
		if math.IsNaN(float64(v)) {
			return "-"
		}
		return strconv.FormatFloat(float64(v), 'f', 1, 64)
	}
	g := func(v float64) string { return f(Seconds(v)) }
	fmt.Fprintf(t, "size %s (%d nodes), load average at start %s\n", r.Size, r.Nodes, r.LoadAverage)
	fmt.Fprintf(t, "PHASE\tSECONDS FROM START\n")
	fmt.Fprintf(t, "management plane up\t%s\n", f(r.Phases.ManagementPlaneUp))
	fmt.Fprintf(t, "first control plane's Machine created\t%s\n", f(r.Phases.ControlPlaneMachine))
	fmt.Fprintf(t, "  its VM booting\t%s\n", f(r.Phases.ControlPlaneVMBooting))
	fmt.Fprintf(t, "  its Node registered (API server up, kubeadm init run)\t%s\n", f(r.Phases.ControlPlaneNodeRegistered))
	fmt.Fprintf(t, "  Cluster API reached it (load balancer, cluster cache)\t%s\n", f(r.Phases.ControlPlaneInitialized))
	fmt.Fprintf(t, "CNI applied\t%s\n", f(r.Phases.CNIApplied))
	fmt.Fprintf(t, "first control plane Ready\t%s\n", f(r.Phases.FirstControlPlaneReady))
	fmt.Fprintf(t, "half / 90%% / all nodes Ready\t%s / %s / %s\n", f(r.NodesReadyAt.Half), f(r.NodesReadyAt.NineTenths), f(r.NodesReadyAt.All))
	fmt.Fprintf(t, "all nodes Ready, add-ons running\t%s\n", f(r.Phases.AllNodesReady))
	fmt.Fprintf(t, "delete (Seconds it took)\t%s\n", f(r.Phases.Delete))
	fmt.Fprintf(t, "\nWORKERS (%d), SECONDS\tP50\tP90\tP99\n", r.Workers.Count)
	for _, row := range []struct {
		name string
		p    Percentiles
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
		if len(r.Management.ByCaller) > 0 {
			fmt.Fprintf(t, "management API server per machine by caller\t\n")
		}
		for _, c := range r.Management.ByCaller {
			fmt.Fprintf(t, "  %s\t%s\n", c.What, g(c.Count))
		}
		for _, c := range r.Management.ByController {
			fmt.Fprintf(t, "  %s\t%s\n", c.What, g(c.Count))
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

// ParseSize reads CONTROL-PLANE+LINUX+WINDOWS.
func ParseSize(size string) ([3]int32, error) {
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

// Callers are the management API server's requests per machine by who made
// them, from the manager's counts by controller (before and after the
// bring-up) and the server's own total.
func Callers(before, after map[apicallers.Key]float64, total float64, machines int) (byCaller, byController []Counts) {
	callers, lines := map[string]float64{}, map[string]float64{}
	var counted float64
	for k, v := range after {
		d := (v - before[k]) / float64(machines)
		if d <= 0 {
			continue
		}
		counted += d
		callers[callerOf(k.Controller)] += d
		name := k.Controller
		if name == "" {
			name = "(no reconcile)"
		}
		lines[name+": "+k.Request] += d
	}
	if rest := total/float64(machines) - counted; rest > 0 {
		callers["outside the manager (local world, API server)"] = rest
	}
	return Top(callers, 8), Top(lines, 12)
}

// callerOf names who owns the controller: winkube's controllers are named
// after the Azure kinds they reconcile (internal/controllers), Cluster
// API's after theirs.
func callerOf(controller string) string {
	switch {
	case controller == "":
		return "manager outside a reconcile (caches, webhooks)"
	case strings.HasPrefix(controller, "azure"), controller == "addonversion":
		return "winkube controllers"
	case controller == "kubeadmconfig":
		return "kubeadm bootstrap"
	case controller == "kubeadmcontrolplane":
		return "KubeadmControlPlane"
	}
	return "Cluster API core"
}
