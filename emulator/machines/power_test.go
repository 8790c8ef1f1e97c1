package machines_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/poll"
)

// powerCycle deallocates a worker VM through Azure's API: its machine is
// switched off with its disk kept, so the node goes NotReady as the node
// lifecycle controller sees its lease expire; started again, the machine
// boots from that disk and the node is Ready again.
func (m *mixed) powerCycle(t *testing.T, ctx context.Context, vm, node string) {
	t.Helper()
	vms, err := endpoint.NewClient(armCfg, subscriptID, armcompute.NewVirtualMachinesClient)
	if err != nil {
		t.Fatal(err)
	}
	var dir string
	for _, n := range rt.Nodes() {
		if n.NodeName == node {
			dir = n.Dir
		}
	}
	if dir == "" {
		t.Fatalf("no machine runs node %s", node)
	}
	wait := func(p *runtime.Poller[armcompute.VirtualMachinesClientDeallocateResponse], err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	wait(vms.BeginDeallocate(ctx, m.azure.rg, vm, nil))
	nodeState := func(want bool) func() string {
		return func() string {
			n, err := m.workload.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if ready, msg := nodeReady(n); ready != want {
				return fmt.Sprintf("node %s Ready=%v (%s), want %v", node, ready, msg, want)
			}
			return ""
		}
	}
	poll.Until(t, 3*time.Minute, nodeState(false))
	t.Logf("deallocated VM %s: node NotReady %s later", vm, time.Since(start).Round(time.Second))
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a deallocated VM's disk is gone: %v", err)
	}
	for _, n := range rt.Nodes() {
		if n.NodeName == node {
			t.Fatalf("the deallocated machine of node %s still runs", node)
		}
	}
	start = time.Now()
	p, err := vms.BeginStart(ctx, m.azure.rg, vm, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 3*time.Minute, nodeState(true))
	t.Logf("started VM %s: node Ready %s later", vm, time.Since(start).Round(time.Second))
}
