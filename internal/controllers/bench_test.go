package controllers_test

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkARMCallsPerWindowsMachine counts the ARM calls the controllers make
// to create one Windows worker (NIC, VM and the reads around them, polls
// included) and to delete it (VM, OS disk, NIC), from the emulator's counters.
// go test ./internal/controllers -run '^$' -bench ARMCalls -benchtime 20x
func BenchmarkARMCallsPerWindowsMachine(b *testing.B) {
	stop := startControllers(b, armCfg)
	defer stop()
	f := newCluster(b, "bench")
	f.waitClusterProvisioned(time.Minute)
	var created, deleted int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("bench-md-win-%05d", i)
		before := totalCalls(emu)
		am := f.newMachine(name, false, true, "1")
		f.waitMachinesProvisioned(time.Minute, name)
		mid := totalCalls(emu)
		f.deleteAndWait(time.Minute, am)
		created += mid - before
		deleted += totalCalls(emu) - mid
	}
	b.StopTimer()
	b.ReportMetric(float64(created)/float64(b.N), "arm-calls/create")
	b.ReportMetric(float64(deleted)/float64(b.N), "arm-calls/delete")
}
