package arm_test

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// bigNetwork makes a resource group and a VNet with room for thousands of
// NICs, and returns the node subnet's ID.
func bigNetwork(w *world) string {
	w.group("rg")
	vnets := must(w.net.NewVirtualNetworksClient(), nil)
	v := done(vnets.BeginCreateOrUpdate(w.ctx, "rg", "big", armnetwork.VirtualNetwork{
		Location: to.Ptr(location),
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/8")}},
			Subnets:      []*armnetwork.Subnet{{Name: to.Ptr("nodes"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.1.0.0/16")}}},
		},
	}, nil))
	return *v.Properties.Subnets[0].ID
}

// createVM creates a VM and its NIC through the SDK, each a long-running
// operation polled to the end.
func createVM(w *world, vms *armcompute.VirtualMachinesClient, subnetID, name string) {
	nic := w.nic("rg", name+"-nic", subnetID)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", name, linuxVM(*nic.ID, "#cloud-config\n"), nil))
}

// BenchmarkVMCreate measures creating one VM (its NIC, then the VM, each a
// long-running operation polled to the end) through the real SDK clients.
// Run it for 1,000 VMs with: go test ./emulator/arm -run '^$' -bench VMCreate -benchtime 1000x
// Allocations count the SDK client and the emulator together (one process);
// arm-calls/vm is what the emulator served per VM; first-ms/vm and
// last-ms/vm are the first and the last tenth's mean: a cost that grows
// with the VM count shows as last above first.
func BenchmarkVMCreate(b *testing.B) {
	w := newWorld(b, nil)
	subnetID := bigNetwork(w)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	w.srv.ResetCounters()
	tenth := max(1, b.N/10)
	var first, last time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		createVM(w, vms, subnetID, fmt.Sprintf("vm-%d", i))
		d := time.Since(t)
		if i < tenth {
			first += d
		}
		if i >= b.N-tenth {
			last += d
		}
	}
	b.StopTimer()
	var calls int64
	for _, n := range w.srv.Counters() {
		calls += n
	}
	b.ReportMetric(float64(calls)/float64(b.N), "arm-calls/vm")
	b.ReportMetric(float64(first.Microseconds())/1000/float64(tenth), "first-ms/vm")
	b.ReportMetric(float64(last.Microseconds())/1000/float64(tenth), "last-ms/vm")
}

// thousandVMs is a world holding 1,000 VMs (and their NICs and disks),
// created 8 at a time.
func thousandVMs(b *testing.B) *world {
	b.Helper()
	w := newWorld(b, nil)
	subnetID := bigNetwork(w)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				createVM(w, vms, subnetID, fmt.Sprintf("vm-%d", i))
			}
		}()
	}
	for i := range 1000 {
		next <- i
	}
	close(next)
	wg.Wait()
	return w
}

// BenchmarkVMGetAt1000 measures reading one VM while the emulator holds
// 1,000: go test ./emulator/arm -run '^$' -bench GetAt1000
func BenchmarkVMGetAt1000(b *testing.B) {
	w := thousandVMs(b)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	rng := rand.New(rand.NewSource(1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = must(vms.Get(w.ctx, "rg", fmt.Sprintf("vm-%d", rng.Intn(1000)), nil))
	}
}

// BenchmarkVMGetAt1000Parallel is the same read from as many clients at
// once as the machine has cores: the emulator's one lock shows here.
func BenchmarkVMGetAt1000Parallel(b *testing.B) {
	w := thousandVMs(b)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewSource(time.Now().UnixNano()))
		for pb.Next() {
			_ = must(vms.Get(w.ctx, "rg", fmt.Sprintf("vm-%d", rng.Intn(1000)), nil))
		}
	})
}

// BenchmarkSaveAt1000 measures writing the emulator's state with 1,000
// VMs (3,000 resources), as the local world does behind every change:
// go test ./emulator/arm -run '^$' -bench SaveAt1000
func BenchmarkSaveAt1000(b *testing.B) {
	w := thousandVMs(b)
	path := filepath.Join(b.TempDir(), "state.json")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.srv.Save(path); err != nil {
			b.Fatal(err)
		}
	}
}
