package arm_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

func TestThrottledWritesAreRetriedBySDK(t *testing.T) {
	t.Parallel() // it waits out throttling's Retry-After, alone in its world
	// Ten writes a second with a burst of three: after three quick writes
	// each further one waits for a token, told so by 429 and Retry-After.
	w := newWorld(t, func(o *arm.Options) { o.Throttle = arm.Throttle{WritesPerHour: 36000, Burst: 3} })
	w.group("rg")
	pips := must(w.net.NewPublicIPAddressesClient(), nil)
	for i := 0; i < 10; i++ {
		done(pips.BeginCreateOrUpdate(w.ctx, "rg", "ip"+string(rune('a'+i)), armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
	}
	c := w.srv.Counters()
	if c["THROTTLED writes"] == 0 {
		t.Fatalf("no write was throttled: %v", c)
	}
	// Every throttled PUT was retried by the SDK until it went through.
	if c["PUT publicIPAddresses"] < 10+c["THROTTLED writes"]-1 {
		t.Fatalf("counters %v: throttled writes were not retried", c)
	}
	if n := len(w.resources("rg")); n != 10 {
		t.Fatalf("%d public IPs, want 10", n)
	}
	// Reads have their own budget, untouched.
	if c["THROTTLED reads"] != 0 {
		t.Fatalf("reads were throttled: %v", c)
	}
}

func TestProvisioningFailureSurfacesAzuresError(t *testing.T) {
	w := newWorld(t, func(o *arm.Options) {
		o.ProvisioningFailures = []arm.ProvisioningFailure{{NameContains: "doomed", Code: "OSProvisioningTimedOut"}}
	})
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	err := pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "doomed-vm", linuxVM(*nic.ID, ""), nil))
	azureCode(t, err, "OSProvisioningTimedOut")
	vm := must(vms.Get(w.ctx, "rg", "doomed-vm", nil))
	if *vm.Properties.ProvisioningState != "Failed" {
		t.Fatalf("state %s, want Failed", *vm.Properties.ProvisioningState)
	}
	// A failed provisioning hands no machine to the runtime at all (the
	// boot would have been started before the operation finished).
	if n := len(w.rt.Running()); n != 0 {
		t.Fatalf("a VM whose provisioning failed was booted")
	}
}

func TestBootFailureShowsInInstanceView(t *testing.T) {
	w := newWorld(t, nil)
	w.rt.Fail = func(m arm.Machine) error {
		if !bytes.HasPrefix(m.CustomData, []byte("#cloud-config")) {
			return errBoot
		}
		return nil
	}
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "garbage"), nil))
	poll.Until(t, 5*time.Second, func() string {
		view := must(vms.InstanceView(w.ctx, "rg", "vm", nil))
		for _, s := range view.Statuses {
			if *s.Code == "BootStatus/failed" {
				if !strings.Contains(*s.Message, "malformed") {
					t.Fatalf("boot failure message %q", *s.Message)
				}
				return ""
			}
		}
		return "the boot failure has not shown in the instance view"
	})
}

type bootError string

func (e bootError) Error() string { return string(e) }

const errBoot = bootError("custom data is malformed: not a cloud-config")

// control calls the emulator's own API with the token.
func (w *world) control(method, path string, body any) *http.Response {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.srv.CACertPEM())
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	var buf bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&buf).Encode(body)
	}
	req, _ := http.NewRequest(method, w.srv.URL()+path, &buf)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	return resp
}

func TestInjectedFaultsAndCounters(t *testing.T) {
	t.Parallel() // it waits out the SDK's retries, alone in its world
	w := newWorld(t, nil)
	w.group("rg")
	w.network("rg")
	vnets := must(w.net.NewVirtualNetworksClient(), nil)

	// Every GET of a VNet fails with 500: the SDK retries, then gives up.
	resp := w.control(http.MethodPut, "/emulator/faults", arm.FaultConfig{Faults: []arm.Fault{{Method: "GET", Kind: "virtualNetworks", Percent: 100, Status: 500}}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /emulator/faults: %s", resp.Status)
	}
	w.control(http.MethodDelete, "/emulator/counters", nil)
	_, err := vnets.Get(w.ctx, "rg", "vnet", nil)
	re := azureCode(t, err, "InternalServerError")
	if re.StatusCode != 500 {
		t.Fatalf("status %d", re.StatusCode)
	}
	var counters map[string]int64
	_ = json.NewDecoder(w.control(http.MethodGet, "/emulator/counters", nil).Body).Decode(&counters)
	if counters["GET virtualNetworks"] != 7 {
		t.Fatalf("GET virtualNetworks counted %d, want 7 (the first try and six retries)", counters["GET virtualNetworks"])
	}

	// Half of them fail: the retries get through.
	w.srv.SetFaults(arm.FaultConfig{Faults: []arm.Fault{{Method: "GET", Kind: "virtualNetworks", Percent: 50, Status: 429}}})
	for i := 0; i < 20; i++ {
		must(vnets.Get(w.ctx, "rg", "vnet", nil))
	}
	// A bad fault is refused.
	if resp := w.control(http.MethodPut, "/emulator/faults", arm.FaultConfig{Faults: []arm.Fault{{Percent: 150, Status: 500}}}); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a fault of 150%% was accepted: %s", resp.Status)
	}
	// Without the token nothing is served.
	req, _ := http.NewRequest(http.MethodGet, w.srv.URL()+"/emulator/counters", nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.srv.CACertPEM())
	r, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}).Do(req)
	if err != nil || r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %v %v", r, err)
	}
}

// A slow-operation fault makes the matching deletes take that long: the VM
// answers Deleting meanwhile, and is gone once it is done.
func TestSlowOperationFault(t *testing.T) {
	t.Parallel() // it waits out a slowed delete, alone in its world
	w := newWorld(t, nil)
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "#cloud-config\n"), nil))
	w.srv.SetFaults(arm.FaultConfig{Faults: []arm.Fault{{Method: "DELETE", Kind: "virtualMachines", OperationDelay: 400 * time.Millisecond}}})
	p := must(vms.BeginDelete(w.ctx, "rg", "vm", nil))
	time.Sleep(100 * time.Millisecond)
	if _, err := p.Poll(w.ctx); err != nil || p.Done() {
		t.Fatalf("the slowed delete is done after 100ms (%v)", err)
	}
	vm := must(vms.Get(w.ctx, "rg", "vm", nil))
	if got := *vm.Properties.ProvisioningState; got != "Deleting" {
		t.Fatalf("a VM being deleted reports %s", got)
	}
	if _, err := p.PollUntilDone(w.ctx, &runtime.PollUntilDoneOptions{Frequency: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	_, err := vms.Get(w.ctx, "rg", "vm", nil)
	azureCode(t, err, "ResourceNotFound")
}

func TestResourceSKUs(t *testing.T) {
	w := newWorld(t, nil)
	rs := must(w.compute.NewResourceSKUsClient(), nil)
	p := rs.NewListPager(&armcompute.ResourceSKUsClientListOptions{Filter: to.Ptr("location eq 'westcentralus'")})
	var zones int
	var seenD4 bool
	for p.More() {
		for _, s := range must(p.NextPage(w.ctx)).Value {
			seenD4 = seenD4 || *s.Name == "Standard_D4s_v3"
			zones += len(s.LocationInfo[0].Zones)
		}
	}
	if !seenD4 || zones != 0 {
		t.Fatalf("westcentralus SKUs: D4s_v3 %v, zones %d (it has none)", seenD4, zones)
	}
}

func TestSaveAndLoadKeepResources(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "#cloud-config\n"), nil))
	path := filepath.Join(t.TempDir(), "state.json")
	if err := w.srv.Save(path); err != nil {
		t.Fatal(err)
	}

	w2 := newWorld(t, nil)
	if err := w2.srv.Load(path); err != nil {
		t.Fatal(err)
	}
	vm := must(must(w2.compute.NewVirtualMachinesClient(), nil).Get(w2.ctx, "rg", "vm", nil))
	if *vm.Properties.ProvisioningState != "Succeeded" {
		t.Fatalf("loaded VM state %s", *vm.Properties.ProvisioningState)
	}
	ms := waitRunning(t, w2.rt, 1)
	if string(ms[0].CustomData) != "#cloud-config\n" {
		t.Fatalf("the loaded VM was booted with custom data %q", ms[0].CustomData)
	}
	// Addresses already handed out stay taken.
	second := w2.nic("rg", "nic2", *nic.Properties.IPConfigurations[0].Properties.Subnet.ID)
	if *second.Properties.IPConfigurations[0].Properties.PrivateIPAddress == *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress {
		t.Fatal("a loaded NIC's address was handed out again")
	}
}

// An OS disk's storage type must suit the size and be one Azure takes for
// an OS disk; resource SKUs say which sizes take Premium SSD.
func TestOSDiskStorageTypes(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	vm := func(name, size, storage string) armcompute.VirtualMachine {
		v := linuxVM(*w.nic("rg", name+"-nic", subnet).ID, "#cloud-config\n")
		v.Properties.HardwareProfile.VMSize = to.Ptr(armcompute.VirtualMachineSizeTypes(size))
		v.Properties.StorageProfile.OSDisk.ManagedDisk = &armcompute.ManagedDiskParameters{StorageAccountType: to.Ptr(armcompute.StorageAccountTypes(storage))}
		return v
	}
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "dv3", vm("dv3", "Standard_D2_v3", "Premium_LRS"), nil)), "InvalidParameter")
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "ultra", vm("ultra", "Standard_D2s_v3", "UltraSSD_LRS"), nil)), "InvalidParameter")
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "v2", vm("v2", "Standard_D2s_v3", "PremiumV2_LRS"), nil)), "InvalidParameter")
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "dv3ssd", vm("dv3ssd", "Standard_D2_v3", "StandardSSD_LRS"), nil))
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "dsv3", vm("dsv3", "Standard_D2s_v3", "Premium_LRS"), nil))

	skus := must(w.compute.NewResourceSKUsClient(), nil)
	premium := map[string]string{}
	p := skus.NewListPager(&armcompute.ResourceSKUsClientListOptions{Filter: to.Ptr("location eq 'westeurope'")})
	for p.More() {
		for _, s := range must(p.NextPage(w.ctx)).Value {
			for _, c := range s.Capabilities {
				if *c.Name == "PremiumIO" {
					premium[*s.Name] = *c.Value
				}
			}
		}
	}
	if premium["Standard_D2_v3"] != "False" || premium["Standard_D2s_v3"] != "True" {
		t.Fatalf("PremiumIO capabilities: %v", premium)
	}
}

// Names past their type's limit and tags past ARM's are refused.
func TestNameAndTagLimits(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	nsgs := must(w.net.NewSecurityGroupsClient(), nil)
	nsg := armnetwork.SecurityGroup{Location: to.Ptr(location)}
	azureCode(t, pollErr(nsgs.BeginCreateOrUpdate(w.ctx, "rg", strings.Repeat("n", 81), nsg, nil)), "InvalidResourceName")
	done(nsgs.BeginCreateOrUpdate(w.ctx, "rg", strings.Repeat("n", 80), nsg, nil))
	vnets := must(w.net.NewVirtualNetworksClient(), nil)
	vnet := armnetwork.VirtualNetwork{Location: to.Ptr(location), Properties: &armnetwork.VirtualNetworkPropertiesFormat{
		AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16")}}}}
	azureCode(t, pollErr(vnets.BeginCreateOrUpdate(w.ctx, "rg", strings.Repeat("v", 65), vnet, nil)), "InvalidResourceName")

	many := map[string]*string{}
	for i := range 51 {
		many[fmt.Sprintf("t%d", i)] = to.Ptr("v")
	}
	for _, tc := range []struct {
		tags map[string]*string
		code string
	}{
		{many, "InvalidTagCount"},
		{map[string]*string{"cost/center": to.Ptr("42")}, "InvalidTagNameCharacters"},
		{map[string]*string{"k": to.Ptr(strings.Repeat("v", 257))}, "InvalidTagValueLength"},
	} {
		bad := nsg
		bad.Tags = tc.tags
		azureCode(t, pollErr(nsgs.BeginCreateOrUpdate(w.ctx, "rg", "tagged", bad, nil)), tc.code)
	}
}
