package arm

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

type vmSize struct {
	vCPUs    int
	memoryGB float64
	family   string
	// premiumIO is the size's PremiumIO capability: it takes Premium SSD
	// disks. The Dv3 series does not, its Dsv3 twin does
	// (virtual-machines/dv3-dsv3-series.md: "Premium Storage: Not
	// Supported" for Dv3).
	premiumIO bool
}

// vmSizes are the sizes the emulator offers in every location; a VM of any
// other size is refused as Azure refuses an unknown size.
var vmSizes = map[string]vmSize{
	"Standard_B1s": {1, 1, "standardBSFamily", true}, "Standard_B2s": {2, 4, "standardBSFamily", true}, "Standard_B2ms": {2, 8, "standardBSFamily", true},
	"Standard_D2s_v3": {2, 8, "standardDSv3Family", true}, "Standard_D4s_v3": {4, 16, "standardDSv3Family", true}, "Standard_D8s_v3": {8, 32, "standardDSv3Family", true},
	"Standard_D2_v3": {2, 8, "standardDv3Family", false}, "Standard_D4_v3": {4, 16, "standardDv3Family", false},
	"Standard_D2s_v5": {2, 8, "standardDSv5Family", true}, "Standard_D4s_v5": {4, 16, "standardDSv5Family", true}, "Standard_D8s_v5": {8, 32, "standardDSv5Family", true},
	"Standard_DS2_v2": {2, 7, "standardDSv2Family", true}, "Standard_F2s_v2": {2, 4, "standardFSv2Family", true}, "Standard_E4s_v3": {4, 32, "standardESv3Family", true},
}

// checkOSDiskStorage refuses an OS disk's storage type that the size or
// the disk type cannot take, as Azure does, synchronously: Premium SSD on
// a size without the PremiumIO capability (400 InvalidParameter, the
// message as microsoft/lisa #689 quotes it), and Ultra Disks and Premium
// SSD v2, which "can only be used as data disks"
// (virtual-machines/disks-types.md; the message is the emulator's).
func checkOSDiskStorage(size, storage, disk string) *armError {
	switch storage {
	case "UltraSSD_LRS", "PremiumV2_LRS":
		e := invalidParameter("osDisk.managedDisk.storageAccountType", "Storage account type '%s' is supported for data disks only; it cannot be used for OS disk '%s'.", storage, disk)
		return e
	case "Premium_LRS", "Premium_ZRS":
		if sz, ok := vmSizes[size]; ok && !sz.premiumIO {
			return invalidParameter("osDisk.managedDisk.storageAccountType", "Requested operation cannot be performed because the VM size %s does not support the storage account type %s of disk '%s'. Consider updating the VM to a size that supports Premium storage.", size, storage, disk)
		}
	}
	return nil
}

func capability(v bool) string {
	if v {
		return "True"
	}
	return "False"
}

func sizeNames() []string {
	var out []string
	for n := range vmSizes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

type locationInfo struct {
	zones []string
}

// locations are the regions the emulator knows; westcentralus has no
// availability zones, as in Azure.
var locations = map[string]locationInfo{
	"westeurope": {[]string{"1", "2", "3"}}, "northeurope": {[]string{"1", "2", "3"}}, "uksouth": {[]string{"1", "2", "3"}},
	"eastus": {[]string{"1", "2", "3"}}, "eastus2": {[]string{"1", "2", "3"}}, "westus2": {[]string{"1", "2", "3"}},
	"westus3": {[]string{"1", "2", "3"}}, "southcentralus": {[]string{"1", "2", "3"}}, "centralus": {[]string{"1", "2", "3"}},
	"westcentralus": {nil},
}

// normalizeLocation turns a location as the portal writes it ("West
// Europe") into its name ("westeurope"); ARM accepts both.
func normalizeLocation(l string) string {
	return strings.ToLower(strings.ReplaceAll(l, " ", ""))
}

func sameLocation(a, b string) bool { return normalizeLocation(a) == normalizeLocation(b) }

func locationNames() string {
	names := make([]string, 0, len(locations))
	for l := range locations {
		names = append(names, l)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// serveResourceSKUs answers the resource SKUs API with the VM sizes, their
// capabilities and each location's zones.
func (s *Server) serveResourceSKUs(w http.ResponseWriter, r *http.Request) {
	filter := strings.ToLower(r.URL.Query().Get("$filter"))
	var locs []string
	for l := range locations {
		if filter == "" || strings.Contains(filter, "'"+l+"'") {
			locs = append(locs, l)
		}
	}
	sort.Strings(locs)
	var items []any
	for _, name := range sizeNames() {
		sz := vmSizes[name]
		for _, l := range locs {
			items = append(items, map[string]any{
				"resourceType": "virtualMachines", "name": name, "tier": "Standard",
				"size": strings.TrimPrefix(name, "Standard_"), "family": sz.family,
				"locations":    []any{l},
				"locationInfo": []any{map[string]any{"location": l, "zones": toAny(locations[l].zones)}},
				"capabilities": []any{
					map[string]any{"name": "vCPUs", "value": strconv.Itoa(sz.vCPUs)},
					map[string]any{"name": "MemoryGB", "value": strconv.FormatFloat(sz.memoryGB, 'f', -1, 64)},
					map[string]any{"name": "AcceleratedNetworkingEnabled", "value": strconv.FormatBool(sz.vCPUs >= 2)},
					map[string]any{"name": "HyperVGenerations", "value": "V1,V2"},
					map[string]any{"name": "PremiumIO", "value": capability(sz.premiumIO)},
				},
				"restrictions": []any{},
			})
		}
	}
	writeList(w, items)
}

func toAny(ss []string) []any {
	out := make([]any, 0, len(ss))
	for _, s := range ss {
		out = append(out, s)
	}
	return out
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
