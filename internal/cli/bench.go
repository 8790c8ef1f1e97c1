package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/winkube/winkube/internal/bench"
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
				n, err := bench.ParseSize(s)
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
			var reports []*bench.Report
			for _, s := range o.sizes {
				r, err := o.run(cmd.Context(), cmd.ErrOrStderr(), b, s)
				if err != nil {
					return fmt.Errorf("size %s: %w", s, err)
				}
				reports = append(reports, r)
				if o.output == "table" {
					r.WriteTable(cmd.OutOrStdout())
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

func (o *benchOptions) run(ctx context.Context, errOut io.Writer, bin, size string) (*bench.Report, error) {
	progress := progressPrinter(errOut)
	n, err := bench.ParseSize(size)
	if err != nil {
		return nil, err
	}
	r := &bench.Report{Size: size, Nodes: int(n[0] + n[1] + n[2]), LoadAverage: bench.LoadAverage()}
	dir, err := os.MkdirTemp("", "winkube-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	prof := bench.NewProfiler(o.profile, size)
	defer prof.Stop()
	self := os.Getpid()
	cpu0 := localworld.CPUTime(self)
	if err := prof.StartCPU("up"); err != nil {
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
	r.Phases.ManagementPlaneUp = bench.Seconds(time.Since(start).Seconds())
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
	r.Phases.AllNodesReady = bench.Seconds(ready.Sub(start).Seconds())
	prof.StopCPU()
	if err := prof.Heap(); err != nil {
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
	r.Timeline(start, tl)
	arm := w.Emulator().Counters()
	r.ARM.Requests = bench.Total(arm)
	r.ARM.PerMachine = float64(r.ARM.Requests) / float64(r.Nodes)
	r.ARM.Top = bench.Top(bench.ToFloat(arm), 8)
	w.Emulator().ResetCounters()
	apiUp, err := w.APIRequests(ctx)
	if err != nil {
		r.APIServer.Error = err.Error()
	} else if minutes := ready.Sub(tl.ControlPlaneProvisioned).Minutes(); minutes > 0 && !tl.ControlPlaneProvisioned.IsZero() {
		r.APIServer.BringUpPerNodeMinute = bench.Sum(apiUp) / float64(r.Nodes) / minutes
		r.APIServer.Top = bench.Top(apiUp, 8)
	}

	if mgmtErr == nil {
		var now map[string]float64
		if now, mgmtErr = w.ManagementRequests(ctx); mgmtErr == nil {
			for k, v := range mgmtStart {
				now[k] -= v
			}
			r.Management.Requests = bench.Sum(now)
			r.Management.PerMachine = r.Management.Requests / float64(r.Nodes)
			r.Management.Top = bench.Top(now, 8)
		}
	}
	if mgmtErr != nil {
		r.Management.Error = mgmtErr.Error()
	}

	// What the running cluster costs, per minute.
	if o.steady > 0 {
		if err := prof.StartCPU("steady"); err != nil {
			return nil, err
		}
		progress(fmt.Sprintf("measuring the running cluster for %s", o.steady))
		t0 := time.Now()
		select {
		case <-time.After(o.steady):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		prof.StopCPU()
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
				r.APIServer.SteadyPerNodeMinute = bench.Sum(rate)
				r.APIServer.Top = bench.Top(rate, 8)
			}
		}
	}
	r.MemoryMiB.WinkubePeak = localworld.MemoryKB("VmHWM:", self) / 1024

	if err := prof.StartCPU("delete"); err != nil {
		return nil, err
	}
	cpuDel := localworld.CPUTime(self)
	armDel := w.Emulator().Counters()
	del := time.Now()
	if err := w.DeleteCluster(ctx); err != nil {
		return nil, err
	}
	r.Phases.Delete = bench.Seconds(time.Since(del).Seconds())
	prof.StopCPU()
	r.CPUSeconds.Winkube.Delete = (localworld.CPUTime(self) - cpuDel).Seconds()
	r.ARM.DeletePerMachine = float64(bench.Total(w.Emulator().Counters())-bench.Total(armDel)) / float64(r.Nodes)
	r.Profiles = prof.Written()
	return r, nil
}

const (
	benchVersion = "v1.36.3"
	benchTimeout = 20 * time.Minute
)
