// Package measure runs what `winkube bench` measures: a world brought up,
// watched and deleted, its figures filled into a bench.Report. It is apart
// from package bench so that the report's tests link no world.
package measure

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/winkube/winkube/internal/bench"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
)

// Options say what world Run brings up and how long it watches it.
type Options struct {
	// Size is CONTROL-PLANE+LINUX+WINDOWS, as ParseSize reads it.
	Size string
	// Bin is the directory of the control-plane binaries.
	Bin               string
	KubernetesVersion string
	// Timeout bounds the wait for every node to be Ready.
	Timeout time.Duration
	// Steady is how long the running cluster is measured (0 skips it).
	Steady time.Duration
	// ProfileDir receives the CPU and heap profiles ("" for none).
	ProfileDir string
	Progress   func(string)
	// ScratchParent is where the run's scratch state directory is made
	// (os.TempDir() when empty).
	ScratchParent string
}

// Run brings up a Windows-flavor world of the size in a scratch state
// directory, waits for every node to be Ready, watches it for Steady,
// deletes the cluster and reports each phase's time, requests, CPU and
// memory. A run that fails keeps its state directory and says where.
func Run(ctx context.Context, o Options) (_ *bench.Report, err error) {
	size, progress := o.Size, o.Progress
	n, err := bench.ParseSize(size)
	if err != nil {
		return nil, err
	}
	r := &bench.Report{Size: size, Nodes: int(n[0] + n[1] + n[2]), LoadAverage: bench.LoadAverage()}
	dir, err := os.MkdirTemp(o.ScratchParent, "winkube-bench-")
	if err != nil {
		return nil, err
	}
	var notReady []string
	defer func() { err = bench.FinishState(dir, notReady, err) }()
	prof := bench.NewProfiler(o.ProfileDir, size)
	defer prof.Stop()
	self := os.Getpid()
	cpu0 := localworld.CPUTime(self)
	if err := prof.StartCPU("up"); err != nil {
		return nil, err
	}
	start := time.Now()
	w, err := localworld.Start(ctx, localworld.Options{
		Name: "bench", Flavor: flavors.Windows, KubernetesVersion: o.KubernetesVersion, ControlPlaneNodes: n[0], LinuxNodes: n[1], WindowsNodes: n[2],
		WindowsVersion: "2022", StateDir: dir, Bin: o.Bin, Progress: progress,
	})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	r.Phases.ManagementPlaneUp = bench.Seconds(time.Since(start).Seconds())
	w.Emulator().ResetCounters()
	mgmtStart, mgmtErr := w.ManagementRequests(ctx)
	callersStart := w.ManagementRequestsByController()
	if err := w.CreateCluster(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := w.WaitReady(wctx); err != nil {
		notReady = stillNotReady(ctx, w)
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
			r.Management.ByCaller, r.Management.ByController = bench.Callers(callersStart, w.ManagementRequestsByController(), r.Management.Requests, r.Nodes)
		}
	}
	if mgmtErr != nil {
		r.Management.Error = mgmtErr.Error()
	}

	// What the running cluster costs, per minute.
	if o.Steady > 0 {
		if err := prof.StartCPU("steady"); err != nil {
			return nil, err
		}
		progress(fmt.Sprintf("measuring the running cluster for %s", o.Steady))
		t0 := time.Now()
		select {
		case <-time.After(o.Steady):
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
				r.APIServer.SteadySeconds = o.Steady.Seconds()
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

// stillNotReady are the nodes not Ready after the wait for them ended, on
// a context of its own: the run's may be what ended it.
func stillNotReady(ctx context.Context, w *localworld.World) []string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	st, _ := w.Status(ctx)
	return st.NotReady
}
