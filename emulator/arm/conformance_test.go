package arm_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/arm/internal/sdkops"
	"github.com/winkube/winkube/internal/poll"
)

// sdkOperations are the operations the Azure SDK for Go modules of go.mod
// declare: generated from azure-rest-api-specs, they say what each
// operation answers. Nobody here wrote them. Three tests read them; the
// modules are located with one go list and parsed once per test binary
// (the callers only read the map).
func sdkOperations(t *testing.T) map[string]sdkops.Operation {
	t.Helper()
	sdkOps.once.Do(func() { sdkOps.ops, sdkOps.err = loadSDKOperations() })
	if sdkOps.err != nil {
		t.Fatal(sdkOps.err)
	}
	return sdkOps.ops
}

var sdkOps struct {
	once sync.Once
	ops  map[string]sdkops.Operation
	err  error
}

func loadSDKOperations() (map[string]sdkops.Operation, error) {
	mods := []string{
		"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7",
		"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7",
		"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources",
		"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi",
		"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2",
	}
	// go list -m prints the modules' directories in the order asked.
	b, err := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Dir}}"}, mods...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m %s: %w", strings.Join(mods, " "), err)
	}
	dirs := strings.Fields(string(b))
	if len(dirs) != len(mods) {
		return nil, fmt.Errorf("go list -m of %d modules printed %d directories: %q", len(mods), len(dirs), b)
	}
	out := map[string]sdkops.Operation{}
	for _, dir := range dirs {
		ops, err := sdkops.Load(dir)
		if err != nil {
			return nil, err
		}
		for _, op := range ops {
			out[op.ID] = op
		}
	}
	return out, nil
}

// template reduces a path template to its shape: literals without case,
// parameters as {}.
func template(p string) string {
	seg := strings.Split(strings.Trim(p, "/"), "/")
	for i, s := range seg {
		if strings.HasPrefix(s, "{") {
			seg[i] = "{}"
		} else {
			seg[i] = strings.ToLower(s)
		}
	}
	return strings.Join(seg, "/")
}

// Every route the emulator serves is an operation of the SDK, with its
// method and path, at an api-version the emulator accepts.
func TestServedOperationsAreTheSDKs(t *testing.T) {
	t.Parallel() // it reads the SDK, which the waiting tests leave time for
	sdk := sdkOperations(t)
	for _, op := range arm.ServedOperations() {
		want, ok := sdk[op.ID]
		if !ok {
			t.Errorf("%s %s is served, but no SDK operation %s exists", op.Method, op.Path, op.ID)
			continue
		}
		if want.Method != op.Method || template(want.Path) != template(op.Path) {
			t.Errorf("%s: served as %s %s, the SDK calls %s %s", op.ID, op.Method, op.Path, want.Method, want.Path)
		}
		if !slices.Contains(op.APIVersions, want.APIVersion) {
			t.Errorf("%s: the SDK calls it with api-version %s, which the emulator refuses", op.ID, want.APIVersion)
		}
	}
}

// conformance drives every served operation over raw HTTP with the SDK's
// api-version and checks the answer against the SDK's declaration.
type conformance struct {
	t      *testing.T
	base   string
	client *http.Client
	sdk    map[string]sdkops.Operation
	// tried counts the served operations exercised.
	tried map[string]int
	// bearer is the token presented; the static test token when empty.
	bearer string
	// sends, when set, is another client whose api-versions are sent
	// (clients_test.go).
	sends *apiClient
}

// version is the api-version the operation is called with: the client's,
// or the SDK's of go.mod for an operation the client does not have.
func (c *conformance) version(id string) string {
	op := c.sdk[id]
	if c.sends != nil {
		if v := c.sends.version(op.Method, op.Path); v != "" {
			return v
		}
	}
	return op.APIVersion
}

// checkServedAs holds an answer to a version the emulator does not list to
// the header that names the version it was served as.
func (c *conformance) checkServedAs(id, asked string, a answer) {
	c.t.Helper()
	got := a.header.Get(arm.ServedAPIVersionHeader)
	for _, op := range arm.ServedOperations() {
		if op.ID != id {
			continue
		}
		switch {
		case slices.Contains(op.APIVersions, asked) && got != "":
			c.t.Errorf("%s at its own api-version %s: answered %s %s", id, asked, arm.ServedAPIVersionHeader, got)
		case !slices.Contains(op.APIVersions, asked) && (got == "" || !slices.Contains(op.APIVersions, got)):
			c.t.Errorf("%s at api-version %s, which the emulator does not list: %s is %q, not one of its versions", id, asked, arm.ServedAPIVersionHeader, got)
		}
	}
}

func (c *conformance) token() string {
	if c.bearer != "" {
		return c.bearer
	}
	return token
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (c *conformance) do(method, path, apiVersion string, body any, hdr map[string]string) answer {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path+"?api-version="+apiVersion, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token())
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return c.send(req)
}

// send makes a request and reads the whole answer.
func (c *conformance) send(req *http.Request) answer {
	c.t.Helper()
	resp, err := c.client.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func fill(tmpl string, params map[string]string) string {
	seg := strings.Split(tmpl, "/")
	for i, s := range seg {
		if strings.HasPrefix(s, "{") {
			v, ok := params[strings.Trim(s, "{}")]
			if !ok {
				v = "missing-" + strings.Trim(s, "{}")
			}
			seg[i] = v
		}
	}
	return strings.Join(seg, "/")
}

// call runs one operation and checks its answer: a status the SDK
// accepts, and for a long-running operation the polling it declares,
// followed to the end.
func (c *conformance) call(id string, params map[string]string, body any) answer {
	c.t.Helper()
	op, ok := c.sdk[id]
	if !ok {
		c.t.Fatalf("no SDK operation %s", id)
	}
	c.tried[id]++
	a := c.do(op.Method, fill(op.Path, params), c.version(id), body, nil)
	c.checkServedAs(id, c.version(id), a)
	if !slices.Contains(op.Statuses, a.status) {
		c.t.Errorf("%s: answered %d (%s), the SDK accepts %v", id, a.status, bytes.TrimSpace(a.raw), op.Statuses)
		return a
	}
	if !op.LongRunning || a.status == http.StatusNoContent {
		return a
	}
	asyncURL, locURL := a.header.Get("Azure-AsyncOperation"), a.header.Get("Location")
	if asyncURL == "" && locURL == "" {
		c.t.Errorf("%s: long-running, but the answer has neither Azure-AsyncOperation nor Location", id)
		return a
	}
	if op.FinalStateVia == "location" || (op.FinalStateVia == "" && op.Method == http.MethodDelete) {
		if locURL == "" {
			c.t.Errorf("%s: final state via location, but no Location header", id)
			return a
		}
		final := c.pollLocation(id, locURL)
		switch op.Method {
		case http.MethodPut, http.MethodPatch:
			if final.status != http.StatusOK || final.body["id"] == nil {
				c.t.Errorf("%s: the Location URL ended with %d %s, not 200 with the resource", id, final.status, bytes.TrimSpace(final.raw))
			}
		case http.MethodPost:
			if final.status != http.StatusOK {
				c.t.Errorf("%s: the Location URL ended with %d, not 200", id, final.status)
			}
		}
		return a
	}
	if asyncURL != "" {
		c.pollAsync(id, asyncURL)
	}
	return a
}

func (c *conformance) get(url string) answer {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+c.token())
	return c.send(req)
}

func (c *conformance) pollLocation(id, url string) answer {
	var a answer
	poll.Until(c.t, 20*time.Second, func() string {
		if a = c.get(url); a.status == http.StatusAccepted {
			return id + ": its operation did not end"
		}
		return ""
	})
	return a
}

func (c *conformance) pollAsync(id, url string) {
	poll.Until(c.t, 20*time.Second, func() string {
		a := c.get(url)
		switch a.body["status"] {
		case "Succeeded":
		case "Failed", "Canceled":
			c.t.Errorf("%s: its operation ended %v: %s", id, a.body["status"], a.raw)
		default:
			return id + ": its operation did not end"
		}
		return ""
	})
}

// notFound checks the answer for a resource that does not exist: 404 with
// the code ARM gives, or for a delete what the SDK accepts. Only the last
// name of the path is changed (or, with group, the resource group's).
func (c *conformance) notFound(id string, params map[string]string, group bool, code string) {
	c.t.Helper()
	op := c.sdk[id]
	c.tried[id+" not found"]++
	params = with2(params, "", "")
	if group {
		params["resourceGroupName"] = "no-such-group"
	} else {
		seg := strings.Split(op.Path, "/")
		last := strings.Trim(seg[len(seg)-1], "{}")
		params[last] = params[last] + "99"
	}
	a := c.do(op.Method, fill(op.Path, params), c.version(id), nil, nil)
	if op.Method == http.MethodDelete && code == "" {
		if !slices.Contains(op.Statuses, a.status) {
			c.t.Errorf("%s of a missing resource: %d, the SDK accepts %v", id, a.status, op.Statuses)
		}
		return
	}
	errCode := ""
	if e, ok := a.body["error"].(map[string]any); ok {
		errCode, _ = e["code"].(string)
	}
	if a.status != http.StatusNotFound || errCode != code {
		c.t.Errorf("%s of a missing resource: %d %s, want 404 %s", id, a.status, bytes.TrimSpace(a.raw), code)
	}
}

// Every served operation answers as the SDK declares: on success, when
// what it names does not exist, on conflict, and when the api-version is
// one Azure does not have; at the api-versions of go.mod's SDK, of the
// newest SDK releases of each language tried (clients_test.go), and at a version
// dated after every one the emulator knows.
func TestServedOperationsAnswerAsTheSDKDeclares(t *testing.T) {
	t.Parallel() // each of its worlds is its own; the waiting tests leave it time
	sdk := sdkOperations(t)
	t.Run("Azure SDK for Go modules of go.mod", func(t *testing.T) { conform(t, sdk, nil) })
	for _, cl := range loadClients(t) {
		t.Run(cl.name, func(t *testing.T) { conform(t, sdk, cl) })
	}
}

func conform(t *testing.T, sdk map[string]sdkops.Operation, cl *apiClient) {
	w := newWorld(t, nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.srv.CACertPEM())
	c := &conformance{t: t, base: w.srv.URL(), sdk: sdk, tried: map[string]int{}, sends: cl,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}

	p := map[string]string{
		"subscriptionId": sub, "resourceGroupName": "conf", "location": location,
		"virtualNetworkName": "vnet", "subnetName": "nodes", "networkSecurityGroupName": "nsg", "securityRuleName": "allow-https",
		"defaultSecurityRuleName": "DenyAllInBound", "routeTableName": "rt", "routeName": "r1", "natGatewayName": "nat",
		"publicIpAddressName": "pip", "loadBalancerName": "lb", "inboundNatRuleName": "ssh", "backendAddressPoolName": "pool2",
		"frontendIPConfigurationName": "fe", "probeName": "probe", "loadBalancingRuleName": "https",
		"networkInterfaceName": "nic", "vmName": "vm", "vmScaleSetName": "ss", "virtualMachineScaleSetName": "ss",
		"instanceId": "0", "virtualmachineIndex": "0", "diskName": "disk", "imageName": "img", "availabilitySetName": "as",
		"publisherName": "cncf-upstream", "offer": "capi", "skus": "ubuntu-2204-gen1", "version": "127.14.20240517",
		"publicGalleryName": "ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019", "galleryImageName": "capi-ubun2-2404", "galleryImageVersionName": "1.31.1",
		"resourceName": "uai", "scope": "subscriptions/" + sub + "/resourceGroups/conf", "roleAssignmentName": "7a51ce93-af62-4b80-8d34-cf1fab928374",
		"roleDefinitionId": "b24988ac-6180-42a0-ab88-20f7382dd24c", "runCommandName": "rc",
	}
	id := func(typ, name string) map[string]any {
		return map[string]any{"id": "/subscriptions/" + sub + "/resourceGroups/conf/providers/" + typ + "/" + name}
	}
	loc := map[string]any{"location": location}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	subnetRef := id("Microsoft.Network/virtualNetworks", "vnet/subnets/nodes")
	lbID := "/subscriptions/" + sub + "/resourceGroups/conf/providers/Microsoft.Network/loadBalancers/lb"
	vmProps := func(nic map[string]any) map[string]any {
		return map[string]any{
			"hardwareProfile": map[string]any{"vmSize": "Standard_D2s_v3"},
			"storageProfile": map[string]any{
				"imageReference": map[string]any{"publisher": "cncf-upstream", "offer": "capi", "sku": "ubuntu-2204-gen1", "version": "latest"},
				"osDisk":         map[string]any{"createOption": "FromImage", "diskSizeGB": 128},
			},
			"osProfile": map[string]any{"computerName": "vm", "adminUsername": "capi", "linuxConfiguration": map[string]any{
				"disablePasswordAuthentication": true,
				"ssh":                           map[string]any{"publicKeys": []any{map[string]any{"path": "/home/capi/.ssh/authorized_keys", "keyData": "ssh-ed25519 AAAA test"}}}}},
			"networkProfile":     map[string]any{"networkInterfaces": []any{nic}},
			"diagnosticsProfile": map[string]any{"bootDiagnostics": map[string]any{"enabled": true}},
		}
	}

	// Success, in the order a cluster's resources depend on each other.
	c.call("ResourceGroups_CreateOrUpdate", p, loc)
	c.call("ResourceGroups_Get", p, nil)
	c.call("ResourceGroups_CheckExistence", p, nil)
	c.call("ResourceGroups_Update", p, map[string]any{"tags": map[string]any{"team": "a"}})
	c.call("ResourceGroups_List", p, nil)
	c.call("Tags_UpdateAtScope", p, map[string]any{"operation": "Merge", "properties": map[string]any{"tags": map[string]any{"cost-center": "42"}}})
	if a := c.call("Tags_GetAtScope", p, nil); !strings.Contains(string(a.raw), `"team":"a"`) || !strings.Contains(string(a.raw), `"cost-center":"42"`) {
		t.Errorf("the group's tags after a Merge: %s", a.raw)
	}
	c.call("SecurityGroups_CreateOrUpdate", p, loc)
	c.call("SecurityRules_CreateOrUpdate", p, map[string]any{"properties": map[string]any{"protocol": "Tcp", "access": "Allow", "direction": "Inbound", "priority": 100,
		"sourceAddressPrefix": "*", "sourcePortRange": "*", "destinationAddressPrefix": "*", "destinationPortRange": "443"}})
	c.call("RouteTables_CreateOrUpdate", p, loc)
	c.call("Routes_CreateOrUpdate", p, map[string]any{"properties": map[string]any{"addressPrefix": "10.244.1.0/24", "nextHopType": "VirtualAppliance", "nextHopIpAddress": "10.0.1.4"}})
	c.call("PublicIPAddresses_CreateOrUpdate", p, with(loc, "sku", map[string]any{"name": "Standard"}, "properties", map[string]any{"publicIPAllocationMethod": "Static", "dnsSettings": map[string]any{"domainNameLabel": "conformance-demo"}}))
	pipNat := with2(p, "publicIpAddressName", "pip-nat")
	c.call("PublicIPAddresses_CreateOrUpdate", pipNat, with(loc, "sku", map[string]any{"name": "Standard"}, "properties", map[string]any{"publicIPAllocationMethod": "Static"}))
	c.call("NatGateways_CreateOrUpdate", p, with(loc, "sku", map[string]any{"name": "Standard"}, "properties", map[string]any{"publicIpAddresses": []any{id("Microsoft.Network/publicIPAddresses", "pip-nat")}}))
	c.call("VirtualNetworks_CreateOrUpdate", p, with(loc, "properties", map[string]any{"addressSpace": map[string]any{"addressPrefixes": []any{"10.0.0.0/16"}}}))
	c.call("Subnets_CreateOrUpdate", p, map[string]any{"properties": map[string]any{"addressPrefix": "10.0.1.0/24",
		"networkSecurityGroup": id("Microsoft.Network/networkSecurityGroups", "nsg"), "routeTable": id("Microsoft.Network/routeTables", "rt"),
		"natGateway": id("Microsoft.Network/natGateways", "nat")}})
	c.call("LoadBalancers_CreateOrUpdate", p, with(loc, "sku", map[string]any{"name": "Standard"}, "properties", map[string]any{
		"frontendIPConfigurations": []any{map[string]any{"name": "fe", "properties": map[string]any{"publicIPAddress": id("Microsoft.Network/publicIPAddresses", "pip")}}},
		"backendAddressPools":      []any{map[string]any{"name": "pool"}},
		"probes":                   []any{map[string]any{"name": "probe", "properties": map[string]any{"protocol": "Tcp", "port": 6443, "intervalInSeconds": 5}}},
		"loadBalancingRules": []any{map[string]any{"name": "https", "properties": map[string]any{"protocol": "Tcp", "frontendPort": 6443, "backendPort": 6443,
			"frontendIPConfiguration": map[string]any{"id": lbID + "/frontendIPConfigurations/fe"}, "backendAddressPool": map[string]any{"id": lbID + "/backendAddressPools/pool"},
			"probe": map[string]any{"id": lbID + "/probes/probe"}}}},
	}))
	c.call("InboundNatRules_CreateOrUpdate", p, map[string]any{"properties": map[string]any{"protocol": "Tcp", "frontendPort": 22, "backendPort": 22,
		"frontendIPConfiguration": map[string]any{"id": lbID + "/frontendIPConfigurations/fe"}}})
	created := c.call("LoadBalancerBackendAddressPools_CreateOrUpdate", p, map[string]any{"properties": map[string]any{}})
	if created.status != http.StatusCreated || created.body["name"] != "pool2" {
		t.Errorf("a new backend pool: %d %s", created.status, created.raw)
	}
	c.call("Interfaces_CreateOrUpdate", p, with(loc, "properties", map[string]any{"ipConfigurations": []any{map[string]any{"name": "ipconfig1", "properties": map[string]any{
		"subnet": subnetRef, "loadBalancerBackendAddressPools": []any{map[string]any{"id": lbID + "/backendAddressPools/pool"}}}}}}))
	c.call("AvailabilitySets_CreateOrUpdate", p, with(loc, "sku", map[string]any{"name": "Aligned"}, "properties", map[string]any{"platformFaultDomainCount": 2}))
	c.call("VirtualMachines_CreateOrUpdate", p, with(loc, "properties", with(vmProps(id("Microsoft.Network/networkInterfaces", "nic")), "availabilitySet", id("Microsoft.Compute/availabilitySets", "as"))))
	c.call("Disks_CreateOrUpdate", p, with(loc, "sku", map[string]any{"name": "Premium_LRS"}, "properties", map[string]any{"creationData": map[string]any{"createOption": "Empty"}, "diskSizeGB": 32}))
	c.call("Images_CreateOrUpdate", p, with(loc, "properties", map[string]any{"storageProfile": map[string]any{"osDisk": map[string]any{"osType": "Linux", "osState": "Generalized", "diskSizeGB": 30}}}))
	ssProfile := vmProps(nil)
	delete(ssProfile, "hardwareProfile")
	delete(ssProfile, "networkProfile")
	delete(obj(ssProfile, "osProfile"), "computerName")
	obj(ssProfile, "osProfile")["computerNamePrefix"] = "ss"
	ssProfile["networkProfile"] = map[string]any{"networkInterfaceConfigurations": []any{map[string]any{"name": "nic", "properties": map[string]any{"primary": true,
		"ipConfigurations": []any{map[string]any{"name": "ipconfig1", "properties": map[string]any{"subnet": subnetRef}}}}}}}
	c.call("VirtualMachineScaleSets_CreateOrUpdate", p, with(loc, "sku", map[string]any{"name": "Standard_D2s_v3", "capacity": 1},
		"properties", map[string]any{"upgradePolicy": map[string]any{"mode": "Manual"}, "virtualMachineProfile": ssProfile}))

	// Reads.
	for _, op := range []string{"SecurityGroups", "SecurityRules", "RouteTables", "Routes", "NatGateways", "PublicIPAddresses", "VirtualNetworks", "Subnets",
		"LoadBalancers", "InboundNatRules", "LoadBalancerBackendAddressPools", "LoadBalancerFrontendIPConfigurations", "LoadBalancerProbes",
		"LoadBalancerLoadBalancingRules", "DefaultSecurityRules", "Interfaces", "VirtualMachines", "VirtualMachineScaleSets", "Disks", "Images", "AvailabilitySets"} {
		c.call(op+"_Get", p, nil)
	}
	for _, op := range []string{"SecurityGroups_List", "SecurityGroups_ListAll", "SecurityRules_List", "DefaultSecurityRules_List", "RouteTables_List", "RouteTables_ListAll",
		"Routes_List", "NatGateways_List", "NatGateways_ListAll", "PublicIPAddresses_List", "PublicIPAddresses_ListAll", "VirtualNetworks_List", "VirtualNetworks_ListAll",
		"Subnets_List", "LoadBalancers_List", "LoadBalancers_ListAll", "InboundNatRules_List", "LoadBalancerBackendAddressPools_List",
		"LoadBalancerFrontendIPConfigurations_List", "LoadBalancerProbes_List", "LoadBalancerLoadBalancingRules_List", "Interfaces_List", "Interfaces_ListAll",
		"VirtualMachines_List", "VirtualMachines_ListAll", "VirtualMachines_InstanceView", "VirtualMachineScaleSets_List", "VirtualMachineScaleSets_ListAll",
		"VirtualMachineScaleSetVMs_List", "VirtualMachineScaleSetVMs_Get", "VirtualMachineScaleSetVMs_GetInstanceView", "VirtualMachineScaleSets_GetInstanceView", "Disks_List", "Disks_ListByResourceGroup",
		"Images_List", "Images_ListByResourceGroup", "Resources_ListByResourceGroup", "Interfaces_ListVirtualMachineScaleSetNetworkInterfaces",
		"Interfaces_ListVirtualMachineScaleSetVMNetworkInterfaces", "VirtualMachineImages_ListPublishers", "VirtualMachineImages_ListOffers",
		"VirtualMachineImages_ListSKUs", "VirtualMachineImages_List", "VirtualMachineImages_Get", "CommunityGalleries_Get", "CommunityGalleryImages_List",
		"CommunityGalleryImages_Get", "CommunityGalleryImageVersions_List", "CommunityGalleryImageVersions_Get", "ResourceSKUs_List",
		"AvailabilitySets_List", "AvailabilitySets_ListBySubscription"} {
		c.call(op, p, nil)
	}
	pools := c.call("LoadBalancerBackendAddressPools_List", p, nil)
	if v, _ := pools.body["value"].([]any); len(v) != 2 {
		t.Errorf("the load balancer's pools listed: %s, want pool and pool2", pools.raw)
	}
	nicName := ""
	if v, _ := c.call("Interfaces_ListVirtualMachineScaleSetVMNetworkInterfaces", p, nil).body["value"].([]any); len(v) == 1 {
		nicName, _ = v[0].(map[string]any)["name"].(string)
	}
	c.call("Interfaces_GetVirtualMachineScaleSetNetworkInterface", with2(p, "networkInterfaceName", nicName), nil)
	if ver := c.call("CommunityGalleryImageVersions_Get", p, nil); ver.body["type"] != "Microsoft.Compute/locations/communityGalleryImageVersion" {
		t.Errorf("a community gallery image version's type: %v", ver.body["type"])
	}

	// Updates and actions.
	tags := map[string]any{"tags": map[string]any{"k": "v"}}
	for _, op := range []string{"SecurityGroups", "RouteTables", "NatGateways", "PublicIPAddresses", "VirtualNetworks", "LoadBalancers", "Interfaces"} {
		if a := c.call(op+"_UpdateTags", p, tags); a.body["tags"].(map[string]any)["k"] != "v" {
			t.Errorf("%s_UpdateTags: tags not applied: %s", op, a.raw)
		}
	}
	c.call("VirtualMachines_Update", p, tags)
	c.call("VirtualMachineScaleSets_Update", p, tags)
	c.call("Disks_Update", p, tags)
	c.call("Images_Update", p, tags)
	c.call("VirtualMachineScaleSetVMs_Update", p, tags)
	for _, a := range []string{"PowerOff", "Start", "Restart", "Deallocate", "Start"} {
		c.call("VirtualMachines_"+a, p, nil)
		c.call("VirtualMachineScaleSetVMs_"+a, p, nil)
		c.call("VirtualMachineScaleSets_"+a, p, map[string]any{"instanceIds": []any{"0"}})
	}
	c.call("VirtualMachineScaleSets_UpdateInstances", p, map[string]any{"instanceIds": []any{"0"}})
	script := map[string]any{"commandId": "RunShellScript", "script": []any{"hostname"}}
	runCommand := map[string]any{"location": location, "properties": map[string]any{"source": map[string]any{"script": "hostname"}}}
	for _, group := range []string{"VirtualMachines", "VirtualMachineScaleSetVMs"} {
		c.call(group+"_RunCommand", p, script)
		c.call(group+"_RetrieveBootDiagnosticsData", p, nil)
	}
	for _, group := range []string{"VirtualMachineRunCommands", "VirtualMachineScaleSetVMRunCommands"} {
		c.call(group+"_CreateOrUpdate", p, runCommand)
		c.call(group+"_Update", p, tags)
	}
	c.call("VirtualMachineRunCommands_GetByVirtualMachine", p, nil)
	c.call("VirtualMachineRunCommands_ListByVirtualMachine", p, nil)
	c.call("VirtualMachineScaleSetVMRunCommands_Get", p, nil)
	c.call("VirtualMachineScaleSetVMRunCommands_List", p, nil)

	// Not found: a missing resource in the group, and anything in a
	// missing group.
	for _, op := range []string{"SecurityGroups", "SecurityRules", "RouteTables", "Routes", "NatGateways", "PublicIPAddresses", "VirtualNetworks", "Subnets",
		"LoadBalancers", "InboundNatRules", "LoadBalancerBackendAddressPools", "LoadBalancerFrontendIPConfigurations", "LoadBalancerProbes",
		"LoadBalancerLoadBalancingRules", "DefaultSecurityRules", "Interfaces", "VirtualMachines", "VirtualMachineScaleSets", "VirtualMachineScaleSetVMs", "Disks", "Images",
		"AvailabilitySets"} {
		c.notFound(op+"_Get", p, false, "ResourceNotFound")
		c.notFound(op+"_Get", p, true, "ResourceGroupNotFound")
	}
	for _, op := range []string{"SecurityGroups", "SecurityRules", "RouteTables", "Routes", "NatGateways", "PublicIPAddresses", "VirtualNetworks", "Subnets",
		"LoadBalancers", "InboundNatRules", "LoadBalancerBackendAddressPools", "Interfaces", "VirtualMachines", "VirtualMachineScaleSets", "Disks", "Images"} {
		c.notFound(op+"_Delete", p, false, "")
	}
	for _, op := range []string{"VirtualMachineRunCommands_GetByVirtualMachine", "VirtualMachineScaleSetVMRunCommands_Get"} {
		c.notFound(op, p, false, "ResourceNotFound")
		c.notFound(op, p, true, "ResourceGroupNotFound")
	}
	c.notFound("ResourceGroups_Get", p, true, "ResourceGroupNotFound")
	c.notFound("ResourceGroups_Delete", p, true, "ResourceGroupNotFound")

	// Conflict: the DNS label of another public IP, a location change, a
	// precondition, and a resource still in use.
	if a := c.do(http.MethodPut, fill(c.sdk["PublicIPAddresses_CreateOrUpdate"].Path, with2(p, "publicIpAddressName", "pip-other")), "2025-01-01",
		with(loc, "properties", map[string]any{"dnsSettings": map[string]any{"domainNameLabel": "conformance-demo"}}), nil); a.status != http.StatusBadRequest || !strings.Contains(string(a.raw), "DnsRecordInUse") {
		t.Errorf("a DNS label in use: %d %s", a.status, a.raw)
	}
	if a := c.do(http.MethodPut, fill(c.sdk["PublicIPAddresses_CreateOrUpdate"].Path, with2(p, "publicIpAddressName", "pip-other")), "2025-01-01",
		with(loc, "properties", map[string]any{"dnsSettings": map[string]any{"domainNameLabel": "12345"}}), nil); a.status != http.StatusBadRequest || !strings.Contains(string(a.raw), "InvalidDomainNameLabel") {
		t.Errorf("a DNS label starting with a digit: %d %s", a.status, a.raw)
	}
	if a := c.do(http.MethodPut, fill(c.sdk["SecurityGroups_CreateOrUpdate"].Path, p), "2025-01-01", map[string]any{"location": "northeurope"}, nil); a.status != http.StatusConflict {
		t.Errorf("moving an NSG to another location: %d %s", a.status, a.raw)
	}
	if a := c.do(http.MethodPut, fill(c.sdk["SecurityGroups_CreateOrUpdate"].Path, p), "2025-01-01", loc, map[string]string{"If-Match": `"stale"`}); a.status != http.StatusPreconditionFailed {
		t.Errorf("a PUT with a stale If-Match: %d %s", a.status, a.raw)
	}
	if a := c.do(http.MethodDelete, fill(c.sdk["Interfaces_Delete"].Path, p), "2025-01-01", nil, nil); a.status < 400 {
		t.Errorf("deleting a NIC that a VM uses: %d", a.status)
	}

	// Api-versions Azure does not have: before the type existed, between
	// two of its versions and an unknown preview (even a later one) are
	// refused with the type's answer; malformed ones with ARM's own.
	for _, op := range arm.ServedOperations() {
		between := oldestStable(t, op.APIVersions).AddDate(0, 0, 1).Format(time.DateOnly)
		for _, v := range []string{"2013-01-01", between, "2099-01-01-preview", "2015-05-01-preview-bogus", "2025-02-30", "latest", "2025-4-1"} {
			a := c.do(op.Method, fill(op.Path, p), v, nil, nil)
			code := ""
			if e, ok := a.body["error"].(map[string]any); ok {
				code, _ = e["code"].(string)
			}
			want := "NoRegisteredProviderFound"
			if strings.HasPrefix(op.ID, "ResourceGroups_") || strings.HasPrefix(op.ID, "Resources_") || strings.HasPrefix(op.ID, "Tags_") || !slices.Contains([]string{"2013-01-01", between, "2099-01-01-preview"}, v) {
				want = "InvalidApiVersionParameter"
			}
			if op.Method == http.MethodHead {
				if a.status != http.StatusBadRequest {
					t.Errorf("%s with api-version %s: %d", op.ID, v, a.status)
				}
				continue
			}
			if a.status != http.StatusBadRequest || code != want {
				t.Errorf("%s with api-version %s: %d %s, want 400 %s", op.ID, v, a.status, bytes.TrimSpace(a.raw), want)
			}
		}
	}

	// Deletes, dependents first.
	c.call("VirtualMachineScaleSets_CreateOrUpdate", p, with(loc, "sku", map[string]any{"name": "Standard_D2s_v3", "capacity": 2},
		"properties", map[string]any{"upgradePolicy": map[string]any{"mode": "Manual"}, "virtualMachineProfile": ssProfile}))
	// Over-provisioning leaves gaps in the instance IDs, as on Azure: the
	// one deleted is one the scale set lists.
	var added []any
	for _, v := range c.call("VirtualMachineScaleSetVMs_List", p, nil).body["value"].([]any) {
		if id, _ := v.(map[string]any)["instanceId"].(string); id != "0" {
			added = append(added, id)
		}
	}
	c.call("VirtualMachineScaleSets_DeleteInstances", p, map[string]any{"instanceIds": added[:1]})
	for _, op := range []string{"VirtualMachineRunCommands_Delete", "VirtualMachineScaleSetVMRunCommands_Delete", "VirtualMachineScaleSetVMs_Delete", "VirtualMachineScaleSets_Delete", "VirtualMachines_Delete", "AvailabilitySets_Delete", "Disks_Delete", "Images_Delete",
		"Interfaces_Delete", "InboundNatRules_Delete", "LoadBalancerBackendAddressPools_Delete", "LoadBalancers_Delete", "Subnets_Delete", "VirtualNetworks_Delete",
		"NatGateways_Delete", "PublicIPAddresses_Delete", "Routes_Delete", "RouteTables_Delete", "SecurityRules_Delete", "SecurityGroups_Delete"} {
		c.call(op, p, nil)
	}
	c.call("ResourceGroups_Delete", p, nil)

	// Identities and RBAC, in an emulator with a directory (role
	// assignments name its principals).
	ic := conformIdentity(t, c, p)

	// Served but not exercised is a gap in this test.
	for _, op := range arm.ServedOperations() {
		if c.tried[op.ID] == 0 && ic.tried[op.ID] == 0 {
			t.Errorf("%s is served but this test never calls it", op.ID)
		}
	}
	t.Logf("%d served operations, %d calls checked", len(arm.ServedOperations()), func() (n int) {
		for _, v := range c.tried {
			n += v
		}
		return
	}())
}

func with2(m map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

func obj(m map[string]any, k string) map[string]any {
	v, _ := m[k].(map[string]any)
	return v
}

// conformIdentity runs the identity and authorization operations against
// an emulator whose Entra directory knows an Owner, as whom it calls them.
func conformIdentity(t *testing.T, base *conformance, p map[string]string) *conformance {
	w := newIDWorld(t)
	ic := &conformance{t: t, base: w.srv.URL(), sdk: base.sdk, tried: map[string]int{}, client: base.client, bearer: w.ownerToken, sends: base.sends}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.srv.CACertPEM())
	ic.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	ic.call("ResourceGroups_CreateOrUpdate", p, map[string]any{"location": location})
	created := ic.call("UserAssignedIdentities_CreateOrUpdate", p, map[string]any{"location": location})
	if created.status != http.StatusCreated {
		t.Errorf("a new identity: %d %s", created.status, created.raw)
	}
	ic.call("UserAssignedIdentities_CreateOrUpdate", p, map[string]any{"location": location})
	ic.call("UserAssignedIdentities_Get", p, nil)
	ic.call("UserAssignedIdentities_ListByResourceGroup", p, nil)
	principal, _ := obj(created.body, "properties")["principalId"].(string)
	ra := map[string]any{"properties": map[string]any{"principalId": principal,
		"roleDefinitionId": "/subscriptions/" + sub + "/providers/Microsoft.Authorization/roleDefinitions/b24988ac-6180-42a0-ab88-20f7382dd24c"}}
	if a := ic.call("RoleAssignments_Create", p, ra); a.status != http.StatusCreated {
		t.Errorf("a new role assignment: %d %s", a.status, a.raw)
	}
	ic.call("RoleAssignments_Get", p, nil)
	ic.call("RoleAssignments_ListForScope", p, nil)
	ic.call("RoleDefinitions_Get", p, nil)
	ic.call("RoleDefinitions_List", p, nil)
	ic.notFound("UserAssignedIdentities_Get", p, false, "ResourceNotFound")
	ic.notFound("UserAssignedIdentities_Get", p, true, "ResourceGroupNotFound")
	ic.notFound("RoleAssignments_Get", p, false, "RoleAssignmentNotFound")
	ic.notFound("RoleDefinitions_Get", p, false, "RoleDefinitionDoesNotExist")
	ic.notFound("UserAssignedIdentities_Delete", p, false, "")
	ic.notFound("RoleAssignments_Delete", p, false, "")
	ic.call("RoleAssignments_Delete", p, nil)
	ic.call("UserAssignedIdentities_Delete", p, nil)
	// A resource's scope takes role assignments too.
	vmScope := with2(p, "scope", p["scope"]+"/providers/Microsoft.Compute/virtualMachines/vm")
	ic.call("RoleAssignments_ListForScope", vmScope, nil)
	return ic
}
