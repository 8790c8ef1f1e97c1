package arm

import (
	"net/http"
	"strings"
)

// nameLimits are the longest names Azure takes per resource type, from
// its naming rules (azure-resource-manager/management/resource-name-rules.md):
// a VNet 2-64, the other network resources 1-80, a scale set 1-64 (a VM's
// 64 for Linux and 15 for Windows are checked with its computer name).
var nameLimits = map[string]int{
	kindVNet: 64, kindSubnet: 80, kindNSG: 80, kindRule: 80, kindRouteTable: 80, kindRoute: 80,
	kindNatGateway: 80, kindPublicIP: 80, kindLB: 80, kindNatRule: 80, kindNIC: 80,
	kindVMSS: 64,
}

// checkNameLength refuses a name longer than its type takes. Network's
// code and message are Azure's InvalidResourceName; the scale set's is
// InvalidParameter, as compute's other name checks.
func checkNameLength(id resourceID, typ string) *armError {
	max, ok := nameLimits[typ]
	if !ok || len(id.Name()) <= max {
		return nil
	}
	if strings.HasPrefix(typ, "Microsoft.Network/") {
		return errorf(http.StatusBadRequest, "InvalidResourceName", "Resource name %s is invalid. The name can be up to %d characters long. It must begin with a word character, and it must end with a word character or with '_'. The name may contain word characters or '.', '-', '_'.", id.Name(), max)
	}
	return invalidParameter("name", "The name %s is %d characters; a resource of type %s takes at most %d.", id.Name(), len(id.Name()), typ, max)
}

// checkTags refuses tags ARM refuses on any resource: more than 50, a
// name of more than 512 characters or with a reserved character, a value
// of more than 256 (azure-resource-manager/management/tag-resources.md,
// "Limitations"). InvalidTagNameCharacters is ARM's code; the others'
// codes are the emulator's own.
func checkTags(body map[string]any) *armError {
	t, _ := body["tags"].(map[string]any)
	if len(t) > 50 {
		return errorf(http.StatusBadRequest, "InvalidTagCount", "The resource has %d tags; at most 50 are allowed.", len(t))
	}
	for k, v := range t {
		if strings.ContainsAny(k, `<>%&\?/`) {
			return errorf(http.StatusBadRequest, "InvalidTagNameCharacters", "The tag names '%s' have reserved characters '<,>,%%,&,\\,?,/' or control characters.", k)
		}
		if len(k) > 512 {
			return errorf(http.StatusBadRequest, "InvalidTagNameLength", "The tag name '%s...' is %d characters; at most 512 are allowed.", k[:32], len(k))
		}
		if s, _ := v.(string); len(s) > 256 {
			return errorf(http.StatusBadRequest, "InvalidTagValueLength", "The value of tag '%s' is %d characters; at most 256 are allowed.", k, len(s))
		}
	}
	return nil
}
