package arm_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// The emulator's throughput at the scale of issue 21's largest world:
//
//	go test ./emulator/arm -run '^$' -bench 'At1000' -benchtime 200x
//
// Every benchmark starts from the same world of 1,000 VMs (with their
// NICs and disks, 3,000 resources) and talks to it through the real SDK
// clients over HTTPS, so the figures include what a caller pays: TLS,
// JSON, long-running operations polled to their end.

const (
	atScale    = 1000
	bigSubnet  = "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/big/subnets/nodes"
	benchPolls = 5 * time.Millisecond
)

// bigNetwork makes a resource group and a VNet with room for tens of
// thousands of NICs.
func bigNetwork(w *world) {
	w.group("rg")
	vnets := must(w.net.NewVirtualNetworksClient(), nil)
	done(vnets.BeginCreateOrUpdate(w.ctx, "rg", "big", armnetwork.VirtualNetwork{
		Location: to.Ptr(location),
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/8")}},
			Subnets:      []*armnetwork.Subnet{{Name: to.Ptr("nodes"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.1.0.0/16")}}},
		},
	}, nil))
}

// untilDone polls a long-running operation to its end. It returns the
// error instead of failing the benchmark, so that it may run on any
// goroutine.
func untilDone[T any](p *runtime.Poller[T], err error) error {
	if err != nil {
		return err
	}
	_, err = p.PollUntilDone(context.Background(), &runtime.PollUntilDoneOptions{Frequency: benchPolls})
	return err
}

// vmClients are one caller's SDK clients, as a controller holds them.
type vmClients struct {
	nics *armnetwork.InterfacesClient
	vms  *armcompute.VirtualMachinesClient
}

func clientsOf(w *world) vmClients {
	return vmClients{nics: must(w.net.NewInterfacesClient(), nil), vms: must(w.compute.NewVirtualMachinesClient(), nil)}
}

// createVM creates a NIC and then a VM on it, each a long-running
// operation polled to the end, as the provider does for a machine.
func (c vmClients) createVM(ctx context.Context, name string) error {
	nic, err := c.nics.BeginCreateOrUpdate(ctx, "rg", name+"-nic", armnetwork.Interface{
		Location: to.Ptr(location),
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name:       to.Ptr("ipconfig1"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(bigSubnet)}},
		}}},
	}, nil)
	if err != nil {
		return err
	}
	made, err := nic.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: benchPolls})
	if err != nil {
		return err
	}
	return untilDone(c.vms.BeginCreateOrUpdate(ctx, "rg", name, linuxVM(*made.ID, "#cloud-config\n"), nil))
}

// createConcurrently creates the named VMs from clients callers at once,
// each with its own SDK clients, and returns the first error.
func createConcurrently(w *world, callers int, names []string) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		c := clientsOf(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(names); i = int(next.Add(1)) - 1 {
				if err := c.createVM(w.ctx, names[i]); err != nil {
					errs <- fmt.Errorf("VM %s: %w", names[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// thousand is the state of a world of 1,000 VMs, built through the SDK
// once per test binary and loaded into a fresh emulator by every
// benchmark round: building it takes far longer than any measurement.
var thousand struct {
	once  sync.Once
	state []byte
	err   error
}

// thousandVMs is a fresh emulator holding 1,000 VMs named vm-0 ... vm-999
// in resource group rg, with their NICs (in bigSubnet) and OS disks.
func thousandVMs(b *testing.B) *world {
	b.Helper()
	thousand.once.Do(func() {
		w := newWorld(b, nil)
		bigNetwork(w)
		names := make([]string, atScale)
		for i := range names {
			names[i] = fmt.Sprintf("vm-%d", i)
		}
		if thousand.err = createConcurrently(w, 8, names); thousand.err != nil {
			return
		}
		path := filepath.Join(b.TempDir(), "state.json")
		if thousand.err = w.srv.Save(path); thousand.err == nil {
			thousand.state, thousand.err = os.ReadFile(path)
		}
	})
	if thousand.err != nil {
		b.Fatalf("building a world of %d VMs: %v", atScale, thousand.err)
	}
	path := filepath.Join(b.TempDir(), "state.json")
	if err := os.WriteFile(path, thousand.state, 0o600); err != nil {
		b.Fatal(err)
	}
	w := newWorld(b, nil)
	if err := w.srv.Load(path); err != nil {
		b.Fatal(err)
	}
	if n := len(w.srv.ResourceIDs()); n < 3*atScale {
		b.Fatalf("the loaded world holds %d resources, want at least %d", n, 3*atScale)
	}
	return w
}

// armCalls is how many requests the emulator has served.
func armCalls(w *world) int64 {
	var n int64
	for _, c := range w.srv.Counters() {
		n += c
	}
	return n
}

// BenchmarkVMCreateAt1000 measures one caller creating one more VM (its
// NIC, then the VM) in a world that already holds 1,000: ns/op is the
// time a caller waits for a VM, polling included.
func BenchmarkVMCreateAt1000(b *testing.B) {
	w := thousandVMs(b)
	c := clientsOf(w)
	w.srv.ResetCounters()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.createVM(w.ctx, fmt.Sprintf("more-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(armCalls(w))/float64(b.N), "arm-calls/vm")
}

// BenchmarkVMCreateAt1000By8Clients measures the emulator's throughput:
// eight callers, each with its own SDK clients (as several controllers'
// workers are), create b.N more VMs in a world of 1,000. vms/s is the
// figure; ns/op is its inverse.
func BenchmarkVMCreateAt1000By8Clients(b *testing.B) {
	w := thousandVMs(b)
	names := make([]string, b.N)
	for i := range names {
		names[i] = fmt.Sprintf("more-%d", i)
	}
	w.srv.ResetCounters()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if err := createConcurrently(w, 8, names); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "vms/s")
	b.ReportMetric(float64(armCalls(w))/float64(b.N), "arm-calls/vm")
}

// BenchmarkVMGetAt1000 measures reading one VM while the emulator holds
// 1,000.
func BenchmarkVMGetAt1000(b *testing.B) {
	w := thousandVMs(b)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	rng := rand.New(rand.NewSource(1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := vms.Get(w.ctx, "rg", fmt.Sprintf("vm-%d", rng.Intn(atScale)), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVMGetAt1000Parallel is the same read from as many callers at
// once as the machine has cores: the emulator's one lock shows here.
func BenchmarkVMGetAt1000Parallel(b *testing.B) {
	w := thousandVMs(b)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	var seed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewSource(seed.Add(1)))
		for pb.Next() {
			if _, err := vms.Get(w.ctx, "rg", fmt.Sprintf("vm-%d", rng.Intn(atScale)), nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSaveAt1000 measures writing the emulator's state with 1,000
// VMs, as the local world does behind its changes: OneVMChanged after one
// VM was updated (a tag, through the SDK; the update itself is not
// timed), the common case while machines come and go; NothingChanged
// twice in a row. MB is the file's size.
func BenchmarkSaveAt1000(b *testing.B) {
	w := thousandVMs(b)
	path := filepath.Join(b.TempDir(), "state.json")
	if err := w.srv.Save(path); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	// A parent benchmark prints no line of its own: each case reports it.
	mb := float64(fi.Size()) / 1e6
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	b.Run("OneVMChanged", func(b *testing.B) {
		b.ReportMetric(mb, "MB")
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			name := fmt.Sprintf("vm-%d", i%atScale)
			if err := untilDone(vms.BeginUpdate(w.ctx, "rg", name, armcompute.VirtualMachineUpdate{Tags: map[string]*string{"round": to.Ptr(fmt.Sprint(i))}}, nil)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := w.srv.Save(path); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("NothingChanged", func(b *testing.B) {
		b.ReportMetric(mb, "MB")
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := w.srv.Save(path); err != nil {
				b.Fatal(err)
			}
		}
	})
}
