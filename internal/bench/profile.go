package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// Profiler writes winkube's CPU profile per phase and a heap profile, when
// it has a directory.
type Profiler struct {
	dir, size string
	cpu       *os.File
	written   []string
}

func (p *Profiler) path(kind string) string {
	return filepath.Join(p.dir, kind+"-"+p.size+".pprof")
}

func (p *Profiler) StartCPU(phase string) error {
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

func (p *Profiler) StopCPU() {
	if p.cpu == nil {
		return
	}
	pprof.StopCPUProfile()
	_ = p.cpu.Close()
	p.written = append(p.written, p.cpu.Name())
	p.cpu = nil
}

// heap writes the live heap after a collection.
func (p *Profiler) Heap() error {
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

func (p *Profiler) Stop() { p.StopCPU() }

// NewProfiler writes profiles into dir, named for size
// (cpu-<phase>-<size>.pprof, heap-<size>.pprof); with dir "" it writes
// none.
func NewProfiler(dir, size string) *Profiler { return &Profiler{dir: dir, size: size} }

// Written are the profiles written so far.
func (p *Profiler) Written() []string { return p.written }
