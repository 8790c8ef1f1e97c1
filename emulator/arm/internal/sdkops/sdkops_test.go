package sdkops_test

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/arm/internal/sdkops"
)

func moduleDir(t *testing.T, mod string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", mod, err)
	}
	return strings.TrimSpace(string(out))
}

// The parser reads what the generated network client says of backend
// address pools, which the emulator's conformance depends on.
func TestLoadReadsTheGeneratedClients(t *testing.T) {
	ops, err := sdkops.Load(moduleDir(t, "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]sdkops.Operation{}
	for _, op := range ops {
		byID[op.ID] = op
	}
	put := byID["LoadBalancerBackendAddressPools_CreateOrUpdate"]
	if put.Method != http.MethodPut || !put.LongRunning || put.FinalStateVia != "azure-async-operation" ||
		put.Path != "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Network/loadBalancers/{loadBalancerName}/backendAddressPools/{backendAddressPoolName}" ||
		len(put.Statuses) != 2 || put.Statuses[0] != 200 || put.Statuses[1] != 201 {
		t.Errorf("LoadBalancerBackendAddressPools_CreateOrUpdate = %+v", put)
	}
	list := byID["LoadBalancerBackendAddressPools_List"]
	if list.Method != http.MethodGet || !list.Pageable || list.LongRunning {
		t.Errorf("LoadBalancerBackendAddressPools_List = %+v", list)
	}
	tags := byID["PublicIPAddresses_UpdateTags"]
	if tags.Method != http.MethodPatch || tags.LongRunning || len(tags.Statuses) != 1 {
		t.Errorf("PublicIPAddresses_UpdateTags = %+v", tags)
	}
	if len(ops) < 300 {
		t.Errorf("only %d operations read from armnetwork", len(ops))
	}
}
