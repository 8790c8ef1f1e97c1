package arm_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/poll"
)

const (
	sub      = "00000000-0000-0000-0000-00000000000a"
	location = "westeurope"
	token    = "test-token"
)

// world is an emulator and the real SDK clients pointed at it.
type world struct {
	t       testing.TB
	srv     *arm.Server
	rt      *arm.RecordingRuntime
	ctx     context.Context
	groups  *armresources.ResourceGroupsClient
	res     *armresources.Client
	net     *armnetwork.ClientFactory
	compute *armcompute.ClientFactory
}

func newWorld(t testing.TB, mutate func(*arm.Options)) *world {
	t.Helper()
	bind(t)
	rt := &arm.RecordingRuntime{}
	opts := arm.Options{Token: token, PollInterval: 5 * time.Millisecond, Runtime: rt, Seed: 1}
	if mutate != nil {
		mutate(&opts)
	}
	var srv *arm.Server
	stale := checkSaveEntries(t, &opts, func() *arm.Server { return srv })
	srv, err := arm.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	t.Cleanup(stale)
	cfg := endpoint.Config{
		ResourceManagerEndpoint: srv.URL(), CACertPEM: srv.CACertPEM(), Credential: endpoint.StaticToken(token),
		Retry: &policy.RetryOptions{MaxRetries: 6, RetryDelay: 5 * time.Millisecond, MaxRetryDelay: time.Second},
	}
	copts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, srv: srv, rt: rt, ctx: context.Background()}
	if w.groups, err = armresources.NewResourceGroupsClient(sub, cfg.Credential, copts); err != nil {
		t.Fatal(err)
	}
	if w.res, err = armresources.NewClient(sub, cfg.Credential, copts); err != nil {
		t.Fatal(err)
	}
	if w.net, err = armnetwork.NewClientFactory(sub, cfg.Credential, copts); err != nil {
		t.Fatal(err)
	}
	if w.compute, err = armcompute.NewClientFactory(sub, cfg.Credential, copts); err != nil {
		t.Fatal(err)
	}
	return w
}

// checkSaveEntries makes every test of the package check, after each
// change the emulator reports, that Save would write what it holds: a
// change to a resource without touch would leave its kept entry stale, and
// a world resumed from that file would differ from the one killed.
// Benchmarks are left alone: the check encodes every resource each time.
// The returned func reports what was found; it runs before the emulator
// closes.
func checkSaveEntries(t testing.TB, opts *arm.Options, srv func() *arm.Server) func() {
	if _, bench := t.(*testing.B); bench {
		return func() {}
	}
	var mu sync.Mutex
	var problems []string
	then := opts.OnChange
	opts.OnChange = func() {
		stale, err := srv().StaleSaveEntries()
		mu.Lock()
		if err != nil {
			problems = append(problems, err.Error())
		}
		for _, id := range stale {
			problems = append(problems, "changed without touch: "+id)
		}
		mu.Unlock()
		if then != nil {
			then()
		}
	}
	return func() {
		// One last look: a change that reported nothing (a boot) may
		// have come after the last report.
		stale, err := srv().StaleSaveEntries()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			problems = append(problems, err.Error())
		}
		for _, id := range stale {
			problems = append(problems, "changed without touch: "+id)
		}
		for _, p := range problems {
			t.Errorf("the state Save keeps is stale: %s", p)
		}
	}
}

// must and done take calls' results directly, which Go allows only as a
// call's whole argument list, so they cannot be handed their test: they
// find it by the goroutine they run on, which bind recorded. A package
// variable would do for tests run one at a time, but the tests that wait
// (timers, throttling, expiries) run in parallel, each on its goroutine.
var bound sync.Map // goroutine ID -> testing.TB

// bind makes t the test of must and done on the calling goroutine, which
// is the one testing runs t (or its subtest) on.
func bind(t testing.TB) {
	id := goroutineID()
	bound.Store(id, t)
	t.Cleanup(func() { bound.CompareAndDelete(id, t) })
}

// tt is the test bound to the calling goroutine.
func tt() testing.TB {
	if t, ok := bound.Load(goroutineID()); ok {
		return t.(testing.TB)
	}
	panic("must or done called on a goroutine no test is bound to: call bind(t) first")
}

// goroutineID reads the calling goroutine's ID from the first line of its
// stack, "goroutine 42 [running]:"; Go offers it nowhere else.
func goroutineID() uint64 {
	var buf [64]byte
	line := buf[:goruntime.Stack(buf[:], false)]
	line = bytes.TrimPrefix(line, []byte("goroutine "))
	id, err := strconv.ParseUint(string(line[:bytes.IndexByte(line, ' ')]), 10, 64)
	if err != nil {
		panic("unexpected stack header: " + string(buf[:]))
	}
	return id
}

func must[T any](v T, err error) T {
	t := tt()
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func done[T any](p *runtime.Poller[T], err error) T {
	t := tt()
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.PollUntilDone(context.Background(), &runtime.PollUntilDoneOptions{Frequency: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pollErr runs a long-running operation to its end and returns its error.
func pollErr[T any](p *runtime.Poller[T], err error) error {
	if err != nil {
		return err
	}
	_, err = p.PollUntilDone(context.Background(), &runtime.PollUntilDoneOptions{Frequency: 5 * time.Millisecond})
	return err
}

// azureCode asserts that err is the SDK's ResponseError with an Azure code.
func azureCode(t testing.TB, err error, code string) *azcore.ResponseError {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("error %v is not an *azcore.ResponseError (want code %s)", err, code)
	}
	if re.ErrorCode != code {
		t.Fatalf("Azure error code %q, want %q: %v", re.ErrorCode, code, err)
	}
	return re
}

func (w *world) group(name string) {
	must(w.groups.CreateOrUpdate(w.ctx, name, armresources.ResourceGroup{Location: to.Ptr(location)}, nil))
}

// network creates a VNet 10.0.0.0/16 with a node subnet 10.0.1.0/24 and
// returns the subnet's ID.
func (w *world) network(rg string) string {
	vnets := must(w.net.NewVirtualNetworksClient(), nil)
	v := done(vnets.BeginCreateOrUpdate(w.ctx, rg, "vnet", armnetwork.VirtualNetwork{
		Location: to.Ptr(location),
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16")}},
			Subnets: []*armnetwork.Subnet{
				{Name: to.Ptr("cp"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.0.0/24")}},
				{Name: to.Ptr("nodes"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.1.0/24")}},
			},
		},
	}, nil))
	for _, s := range v.Properties.Subnets {
		if *s.Name == "nodes" {
			return *s.ID
		}
	}
	w.t.Fatal("no nodes subnet in the VNet")
	return ""
}

func (w *world) nic(rg, name, subnetID string) armnetwork.Interface {
	nics := must(w.net.NewInterfacesClient(), nil)
	return done(nics.BeginCreateOrUpdate(w.ctx, rg, name, armnetwork.Interface{
		Location: to.Ptr(location),
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name:       to.Ptr("ipconfig1"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnetID)}},
		}}},
	}, nil)).Interface
}

func linuxVM(nicID, customData string) armcompute.VirtualMachine {
	return armcompute.VirtualMachine{
		Location: to.Ptr(location),
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: to.Ptr(armcompute.VirtualMachineSizeTypes("Standard_D2s_v3"))},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: &armcompute.ImageReference{Publisher: to.Ptr("cncf-upstream"), Offer: to.Ptr("capi"), SKU: to.Ptr("ubuntu-2204-gen1"), Version: to.Ptr("latest")},
				OSDisk:         &armcompute.OSDisk{CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesFromImage), DiskSizeGB: to.Ptr[int32](128)},
			},
			OSProfile: &armcompute.OSProfile{
				AdminUsername: to.Ptr("capi"),
				CustomData:    to.Ptr(base64.StdEncoding.EncodeToString([]byte(customData))),
				LinuxConfiguration: &armcompute.LinuxConfiguration{
					DisablePasswordAuthentication: to.Ptr(true),
					SSH:                           &armcompute.SSHConfiguration{PublicKeys: []*armcompute.SSHPublicKey{{Path: to.Ptr("/home/capi/.ssh/authorized_keys"), KeyData: to.Ptr("ssh-ed25519 AAAA test")}}},
				},
			},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{ID: to.Ptr(nicID)}}},
		},
	}
}

func windowsVM(nicID, computerName, customData string) armcompute.VirtualMachine {
	vm := linuxVM(nicID, customData)
	vm.Properties.StorageProfile.ImageReference = &armcompute.ImageReference{Publisher: to.Ptr("cncf-upstream"), Offer: to.Ptr("capi-windows"), SKU: to.Ptr("windows-2022-containerd-gen1"), Version: to.Ptr("latest")}
	vm.Properties.StorageProfile.OSDisk.OSType = to.Ptr(armcompute.OperatingSystemTypesWindows)
	vm.Properties.OSProfile.LinuxConfiguration = nil
	vm.Properties.OSProfile.ComputerName = to.Ptr(computerName)
	vm.Properties.OSProfile.AdminPassword = to.Ptr("Random-Passw0rd!")
	vm.Properties.OSProfile.WindowsConfiguration = &armcompute.WindowsConfiguration{}
	return vm
}

func waitRunning(t testing.TB, rt *arm.RecordingRuntime, n int) []arm.Machine {
	t.Helper()
	var ms []arm.Machine
	poll.Until(t, 10*time.Second, func() string {
		if ms = rt.Running(); len(ms) < n {
			return fmt.Sprintf("%d machines running, want %d", len(ms), n)
		}
		return ""
	})
	return ms
}
