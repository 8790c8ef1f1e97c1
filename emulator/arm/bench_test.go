package arm_test

import (
	"fmt"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// BenchmarkVMCreate measures creating one VM (its NIC, then the VM, each a
// long-running operation polled to the end) through the real SDK clients.
// Run it for 1,000 VMs with: go test ./emulator/arm -run '^$' -bench VMCreate -benchtime 1000x
// Allocations count the SDK client and the emulator together (one process);
// arm-calls/vm is what the emulator served per VM.
func BenchmarkVMCreate(b *testing.B) {
	w := newWorld(b, nil)
	w.group("rg")
	vnets := must(w.net.NewVirtualNetworksClient(), nil)
	v := done(vnets.BeginCreateOrUpdate(w.ctx, "rg", "big", armnetwork.VirtualNetwork{
		Location: to.Ptr(location),
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/8")}},
			Subnets:      []*armnetwork.Subnet{{Name: to.Ptr("nodes"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.1.0.0/16")}}},
		},
	}, nil))
	subnetID := *v.Properties.Subnets[0].ID
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	w.srv.ResetCounters()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("vm-%d", i)
		nic := w.nic("rg", name+"-nic", subnetID)
		done(vms.BeginCreateOrUpdate(w.ctx, "rg", name, linuxVM(*nic.ID, "#cloud-config\n"), nil))
	}
	b.StopTimer()
	var calls int64
	for _, n := range w.srv.Counters() {
		calls += n
	}
	b.ReportMetric(float64(calls)/float64(b.N), "arm-calls/vm")
}
