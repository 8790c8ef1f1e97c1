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
	// generations is the size's HyperVGenerations capability: the image
	// generations it boots. Dv3 and Av2 boot generation 1 only
	// (virtual-machines/av2-series.md "VM Generation Support: Generation
	// 1"; Dv3 per coreos/coreos-assembler #4120), the others both.
	generations string
	// accelerated is the AcceleratedNetworkingEnabled capability
	// (av2-series.md and the B-series pages: "Accelerated Networking: Not
	// Supported").
	accelerated bool
	// maxDataDisks is the MaxDataDiskCount capability: how many data
	// disks a VM of the size takes. The numbers are the resource SKUs
	// API's, as kubernetes-sigs/azuredisk-csi-driver keeps them
	// (pkg/azuredisk/azure_dd_max_disk_count.go at e1284a5c) and
	// Microsoft's size pages list them ("Max data disks").
	maxDataDisks int
}

// vmSizes are the sizes the emulator offers in every location; a VM of any
// other size is refused as Azure refuses an unknown size.
var vmSizes = map[string]vmSize{
	"Standard_B1s": {1, 1, "standardBSFamily", true, "V1,V2", false, 2}, "Standard_B2s": {2, 4, "standardBSFamily", true, "V1,V2", false, 4},
	"Standard_B2ms":   {2, 8, "standardBSFamily", true, "V1,V2", false, 4},
	"Standard_D2s_v3": {2, 8, "standardDSv3Family", true, "V1,V2", true, 4}, "Standard_D4s_v3": {4, 16, "standardDSv3Family", true, "V1,V2", true, 8},
	"Standard_D8s_v3": {8, 32, "standardDSv3Family", true, "V1,V2", true, 16},
	"Standard_D2_v3":  {2, 8, "standardDv3Family", false, "V1", true, 4}, "Standard_D4_v3": {4, 16, "standardDv3Family", false, "V1", true, 8},
	"Standard_D2s_v5": {2, 8, "standardDSv5Family", true, "V1,V2", true, 4}, "Standard_D4s_v5": {4, 16, "standardDSv5Family", true, "V1,V2", true, 8},
	"Standard_D8s_v5": {8, 32, "standardDSv5Family", true, "V1,V2", true, 16},
	"Standard_DS2_v2": {2, 7, "standardDSv2Family", true, "V1,V2", true, 8}, "Standard_F2s_v2": {2, 4, "standardFSv2Family", true, "V1,V2", true, 4},
	"Standard_E4s_v3": {4, 32, "standardESv3Family", true, "V1,V2", true, 8},
	"Standard_A2_v2":  {2, 4, "standardAv2Family", false, "V1", false, 4},
	// The size of the Compute specification's VM examples
	// (VirtualMachine_Create_WithSshAuthentication.json): one vCPU, no
	// Premium SSD, no accelerated networking, 4 data disks
	// (virtual-machines/dv2-dsv2-series.md).
	"Standard_D1_v2": {1, 3.5, "standardDv2Family", false, "V1,V2", false, 4},
}

// checkGeneration refuses an image the size cannot boot, as Azure does
// synchronously: 400 BadRequest, the message as microsoft/ga4gh-tes #43
// quotes it.
func checkGeneration(size, generation string) *armError {
	sz, ok := vmSizes[size]
	if !ok || generation == "" || strings.Contains(sz.generations, generation) {
		return nil
	}
	n := strings.TrimPrefix(generation, "V")
	return errorf(http.StatusBadRequest, "BadRequest", "The selected VM size '%s' cannot boot Hypervisor Generation '%s'. If this was a Create operation please check that the Hypervisor Generation of the Image matches the Hypervisor Generation of the selected VM Size. If this was an Update operation please select a Hypervisor Generation '%s' VM Size. For more information, see https://aka.ms/azuregen2vm", size, n, n)
}

// acceleratedSizes lists the sizes that take accelerated networking, for
// the refusal's message.
func acceleratedSizes() string {
	var out []string
	for _, n := range sizeNames() {
		if vmSizes[n].accelerated {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

// SKURestriction is a size the subscription may not deploy in a location,
// or in some of its zones, as the resource SKUs API reports it
// (ResourceSkuRestrictions: type Location or Zone, restrictionInfo,
// reasonCode).
type SKURestriction struct {
	Size     string `json:"size"`
	Location string `json:"location"`
	// Zones are the zones restricted; none restricts the whole location.
	Zones []string `json:"zones,omitempty"`
	// Reason is NotAvailableForSubscription (the default) or QuotaId.
	Reason string `json:"reason,omitempty"`
}

func (r SKURestriction) reason() string {
	if r.Reason == "" {
		return "NotAvailableForSubscription"
	}
	return r.Reason
}

// restricted says whether the subscription may not deploy size in the
// location's zone ("" for a VM without a zone).
func (s *Server) restricted(size, location, zone string) bool {
	for _, r := range s.opts.SKURestrictions {
		if !strings.EqualFold(r.Size, size) || !sameLocation(r.Location, location) {
			continue
		}
		if len(r.Zones) == 0 {
			return true
		}
		for _, z := range r.Zones {
			if z == zone {
				return true
			}
		}
	}
	return false
}

// checkSKUAvailable refuses a VM or scale set of a size restricted where
// it asks to run: 409 SkuNotAvailable with the message Microsoft's
// "error-sku-not-available" troubleshooting page gives (zones ” for a
// request without zones).
func (s *Server) checkSKUAvailable(r *resource, size string, zones []any) *armError {
	loc := str(r.body, "location")
	var asked []string
	hit := len(zones) == 0 && s.restricted(size, loc, "")
	for _, z := range zones {
		zs, _ := z.(string)
		asked = append(asked, zs)
		hit = hit || s.restricted(size, loc, zs) || s.restricted(size, loc, "")
	}
	if !hit {
		return nil
	}
	return errorf(http.StatusConflict, "SkuNotAvailable", "The requested size for resource '%s' is currently not available in location '%s' zones '%s' for subscription '%s'. Please try another size or deploy to a different location or zones. See https://aka.ms/azureskunotavailable for details.",
		r.idStr, normalizeLocation(loc), strings.Join(asked, ","), r.id.Subscription)
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

// locations are the regions the emulator knows; westcentralus and westus
// have no availability zones, as in Azure (westus is the region of the
// Compute specification's examples, e.g. VirtualMachine_Create_
// WithSshAuthentication.json).
var locations = map[string]locationInfo{
	"westus":     {nil},
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
					map[string]any{"name": "AcceleratedNetworkingEnabled", "value": capability(sz.accelerated)},
					map[string]any{"name": "HyperVGenerations", "value": sz.generations},
					map[string]any{"name": "PremiumIO", "value": capability(sz.premiumIO)},
					map[string]any{"name": "MaxDataDiskCount", "value": strconv.Itoa(sz.maxDataDisks)},
				},
				"restrictions": s.restrictionsOf(name, l),
			})
		}
	}
	// Availability sets have one SKU per location that matters: Aligned
	// (managed disks), whose capability gives the set's most fault domains.
	for _, l := range locs {
		items = append(items, map[string]any{
			"resourceType": "availabilitySets", "name": "Aligned", "locations": []any{l},
			"locationInfo": []any{map[string]any{"location": l, "zones": []any{}}},
			"capabilities": []any{map[string]any{"name": "MaximumPlatformFaultDomainCount", "value": strconv.Itoa(maxFaultDomains(l))}},
			"restrictions": []any{},
		})
	}
	writeList(w, items)
}

// restrictionsOf is a size's restrictions in a location, in the shape the
// resource SKUs API gives them: values holds the location, and a zone
// restriction lists its zones in restrictionInfo (Microsoft's
// "AvailabilityZoneNotSupported" troubleshooting page).
func (s *Server) restrictionsOf(size, location string) []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []any{}
	for _, r := range s.opts.SKURestrictions {
		if !strings.EqualFold(r.Size, size) || !sameLocation(r.Location, location) {
			continue
		}
		typ, info := "Location", map[string]any{"locations": []any{location}}
		if len(r.Zones) > 0 {
			typ, info["zones"] = "Zone", toAny(r.Zones)
		}
		out = append(out, map[string]any{"type": typ, "values": []any{location}, "restrictionInfo": info, "reasonCode": r.reason()})
	}
	return out
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

// imageGeneration is the hyperVGeneration of the image a VM or scale set
// names: the marketplace catalog's, a managed image's property (V1 when
// unset, the Compute spec's default), V1 for the community galleries'
// images, which are generation 1 (images.go serves them so).
func (s *Server) imageGeneration(ref map[string]any) string {
	if id := str(ref, "id"); id != "" {
		if im := s.lookup(id); im != nil && str(im.props(), "hyperVGeneration") != "" {
			return str(im.props(), "hyperVGeneration")
		}
		return "V1"
	}
	if str(ref, "communityGalleryImageId") != "" || str(ref, "sharedGalleryImageId") != "" {
		return "V1"
	}
	version := str(ref, "version")
	gen := ""
	for _, im := range s.marketplace(str(ref, "publisher"), str(ref, "offer"), str(ref, "sku")) {
		if strings.EqualFold(version, "latest") || im.Version == version {
			gen = im.generation()
		}
	}
	return gen
}

// checkAcceleratedNetworking refuses accelerated networking on a size
// without it: 400 VMSizeIsNotPermittedToEnableAcceleratedNetworking, the
// messages as Azure/azure-cli #12858 (a VM) and kubernetes-sigs/cluster-api
// #1201 (a scale set) quote them.
func checkAcceleratedNetworking(r *resource, size string, enabled bool, scaleSet bool) *armError {
	sz, ok := vmSizes[size]
	if !ok || !enabled || sz.accelerated {
		return nil
	}
	if scaleSet {
		return errorf(http.StatusBadRequest, "VMSizeIsNotPermittedToEnableAcceleratedNetworkingForVmss", "Virtual machine at index 0 of VM scale set %s has size %s, which is not compatible with enabling accelerated networking in the network profile on the scale set. Compatible VM sizes: %s", r.idStr, size, acceleratedSizes())
	}
	return errorf(http.StatusBadRequest, "VMSizeIsNotPermittedToEnableAcceleratedNetworking", "Virtual machine %s has size %s, which is not compatible with enabling accelerated networking on network interface(s) on the VM. Compatible VM sizes: %s", r.idStr, size, acceleratedSizes())
}
