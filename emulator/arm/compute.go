package arm

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	kindVM       = "Microsoft.Compute/virtualMachines"
	kindDisk     = "Microsoft.Compute/disks"
	kindVMSS     = "Microsoft.Compute/virtualMachineScaleSets"
	kindInstance = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines"

	// Azure's limit on custom data: 64 KiB once decoded.
	maxCustomData    = 64 * 1024
	windowsNameChars = "`~!@#$%^&*()=+_[]{}\\|;:.'\",<>/?"
)

func init() {
	register(&kindInfo{typ: kindVM, topLevel: true, put: putVM, delay: bootDelay, ready: vmReady, deleted: vmDeleted})
	register(&kindInfo{typ: kindDisk, topLevel: true, canDelete: diskAttached})
	register(&kindInfo{typ: kindVMSS, topLevel: true, put: putVMSS, delay: bootDelay, ready: vmssReady})
	register(&kindInfo{typ: kindInstance, readOnly: true, canDelete: instanceDeleting})
}

// osOf is a VM's OS as its PUT settled it from the image's metadata
// (checkProfile records it as the OS disk's osType).
func osOf(storage map[string]any) string {
	if strings.EqualFold(str(storage, "osDisk", "osType"), "Windows") {
		return "Windows"
	}
	return "Linux"
}

func bootDelay(s *Server, r *resource) time.Duration {
	storage := r.props()["storageProfile"]
	if r.kind.typ == kindVMSS {
		storage = get(r.props(), "virtualMachineProfile", "storageProfile")
	}
	sm, _ := storage.(map[string]any)
	if osOf(sm) == "Windows" {
		return s.opts.BootDelayWindows
	}
	return s.opts.BootDelayLinux
}

// validateComputerName applies Azure's host-name rules (resource-name-rules,
// Microsoft.Compute; the OSProfile's computerName in the Compute REST spec):
// Windows at most 15 characters, not entirely numeric, none of the
// characters in windowsNameChars; Linux at most 64, none of them but the
// period. A whole name (not a scale set's prefix) must not end in a hyphen
// or, on Linux, a period.
func validateComputerName(name, os, target string, limit int) *armError {
	prefix := target == "computerNamePrefix"
	if os == "Windows" {
		what := "computer name"
		if prefix {
			what = "computer name prefix"
		}
		if name == "" || len(name) > limit || strings.Trim(name, "0123456789") == "" || strings.ContainsAny(name, windowsNameChars+" ") || (!prefix && strings.HasSuffix(name, "-")) {
			return invalidParameter(target, "Windows %s cannot be more than %d characters long, be entirely numeric, end with a hyphen, or contain the following characters: %s", what, limit, windowsNameChars)
		}
		return nil
	}
	linuxChars := strings.ReplaceAll(windowsNameChars, ".", "")
	if name == "" || len(name) > limit || strings.ContainsAny(name, linuxChars+" ") || (!prefix && (strings.HasSuffix(name, "-") || strings.HasSuffix(name, "."))) {
		return invalidParameter(target, "Linux host name cannot exceed %d characters in length, end with a hyphen or period, or contain the following characters: %s", limit, linuxChars)
	}
	return nil
}

// takeSecrets moves the admin password and custom data out of an OS
// profile into the resource's secrets: Azure never returns them.
func takeSecrets(r *resource, osProfile map[string]any, old *resource) *armError {
	for _, f := range []string{"adminPassword", "customData"} {
		v, ok := osProfile[f].(string)
		delete(osProfile, f)
		if !ok {
			continue
		}
		if f == "customData" {
			raw, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return invalidParameter("customData", "Custom data in OSProfile must be in Base64 encoding and with a maximum length of %d characters.", base64.StdEncoding.EncodedLen(maxCustomData))
			}
			if len(raw) > maxCustomData {
				return invalidParameter("customData", "Custom data in OSProfile must be in Base64 encoding and with a maximum length of %d characters.", base64.StdEncoding.EncodedLen(maxCustomData))
			}
			if old != nil {
				if prev, ok := old.secrets[f].(string); ok && prev != v {
					return errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'customData' is not allowed.")
				}
			}
		}
		r.secrets[f] = v
	}
	return nil
}

func validateOSProfile(osProfile map[string]any, os string, secrets map[string]any) *armError {
	user := str(osProfile, "adminUsername")
	if user == "" {
		return invalidParameter("adminUsername", "Required parameter 'adminUsername' is missing (null).")
	}
	if e := validateAdminUsername(user, os); e != nil {
		return e
	}
	password, hasPassword := secrets["adminPassword"].(string)
	if os == "Windows" && !hasPassword {
		return invalidParameter("adminPassword", "Required parameter 'adminPassword' is missing (null).")
	}
	if hasPassword {
		if e := validateAdminPassword(password, os); e != nil {
			return e
		}
	}
	if os == "Linux" && !hasPassword && len(list(osProfile, "linuxConfiguration", "ssh", "publicKeys")) == 0 {
		return invalidParameter("linuxConfiguration", "Authentication using either SSH or by user name and password must be enabled in Linux profile.")
	}
	return nil
}

// reservedUsernames are the adminUsername values the Compute API refuses
// (OSProfile.adminUsername in azure-rest-api-specs' virtualMachine.json).
var reservedUsernames = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`administrator admin user user1 test user2 test1 user3 admin1 1 123 a actuser adm admin2
		aspnet backup console david guest john owner root server sql support support_388945a0 sys test2 test3 user4 user5`) {
		reservedUsernames[n] = true
	}
}

// validateAdminUsername applies the same spec's rules: the disallowed
// values, at most 20 characters on Windows and 64 on Linux, and no trailing
// period on Windows.
func validateAdminUsername(user, os string) *armError {
	limit := 64
	if os == "Windows" {
		limit = 20
	}
	if reservedUsernames[strings.ToLower(user)] || len(user) > limit || (os == "Windows" && strings.HasSuffix(user, ".")) || strings.ContainsAny(user, `\/"[]:|<>+=;,?*@`) {
		return invalidParameter("adminUsername", "The Admin Username specified is not allowed.")
	}
	return nil
}

// disallowedPasswords are the adminPassword values the Compute API refuses.
var disallowedPasswords = map[string]bool{
	"abc@123": true, "P@$$w0rd": true, "P@ssw0rd": true, "P@ssword123": true, "Pa$$word": true,
	"pass@word1": true, "Password!": true, "Password1": true, "Password22": true, "iloveyou!": true,
}

// validateAdminPassword applies the Compute API's password rules
// (OSProfile.adminPassword): 8 to 123 characters on Windows, 6 to 72 on
// Linux; three of lower case, upper case, digit and special character
// ([\W_]); no control characters; none of the disallowed values.
func validateAdminPassword(p, os string) *armError {
	lo, hi := 6, 72
	if os == "Windows" {
		lo, hi = 8, 123
	}
	var lower, upper, digit, special, control bool
	for _, c := range p {
		switch {
		case c < 0x20 || c == 0x7f:
			control = true
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= '0' && c <= '9':
			digit = true
		default:
			special = true
		}
	}
	classes := 0
	for _, b := range []bool{lower, upper, digit, special} {
		if b {
			classes++
		}
	}
	n := len([]rune(p))
	if n < lo || n > hi || classes < 3 || control || disallowedPasswords[p] {
		return invalidParameter("adminPassword", "The supplied password must be between %d-%d characters long and must satisfy at least 3 of password complexity requirements from the following:\r\n1) Contains an uppercase character\r\n2) Contains a lowercase character\r\n3) Contains a numeric digit\r\n4) Contains a special character\r\n5) Control characters are not allowed", lo, hi)
	}
	return nil
}

// checkProfile validates the image and OS profile of a VM or scale-set
// model: it settles the OS, defaults and checks the computer name (or
// prefix, nameField) against the OS's limit, and moves secrets aside. With
// old set, custom data must not change.
func (s *Server) checkProfile(r, old *resource, storage, osProfile map[string]any, nameField string, windowsLimit, linuxLimit int) (string, *armError) {
	ref, _ := storage["imageReference"].(map[string]any)
	os, imageGB, e := s.imageOf(ref, str(r.body, "location"))
	if e != nil {
		return "", e
	}
	osDisk := obj(storage, "osDisk")
	osDisk["osType"] = os
	if size, _ := osDisk["diskSizeGB"].(float64); size != 0 && size < imageGB {
		e := errorf(http.StatusConflict, "OperationNotAllowed", "The specified disk size %v GB is smaller than the size of the corresponding disk in the VM image: %v GB. This is not allowed. Please choose equal or greater size or do not specify an explicit size.", size, imageGB)
		e.Target = "osDisk.diskSizeGB"
		return "", e
	} else if size == 0 {
		osDisk["diskSizeGB"] = imageGB
	}
	if str(osProfile, nameField) == "" {
		osProfile[nameField] = r.id.Name()
	}
	limit := linuxLimit
	if os == "Windows" {
		limit = windowsLimit
	}
	if e := validateComputerName(str(osProfile, nameField), os, nameField, limit); e != nil {
		return "", e
	}
	if e := takeSecrets(r, osProfile, old); e != nil {
		return "", e
	}
	return os, validateOSProfile(osProfile, os, r.secrets)
}

func putVM(s *Server, r, old *resource) *armError {
	p := r.props()
	size := str(p, "hardwareProfile", "vmSize")
	if _, ok := vmSizes[size]; !ok {
		return invalidParameter("vmSize", "The value %s provided for the VM size is not valid. The valid sizes in the current region are: %s.", size, strings.Join(sizeNames(), ", "))
	}
	if e := s.validateZones(r); e != nil {
		return e
	}
	storage := obj(p, "storageProfile")
	osProfile := obj(p, "osProfile")
	os, e := s.checkProfile(r, old, storage, osProfile, "computerName", 15, 64)
	if e != nil {
		return e
	}
	if old != nil {
		if e := unchangeable(old, r); e != nil {
			return e
		}
	}
	nics := list(p, "networkProfile", "networkInterfaces")
	if len(nics) == 0 {
		return invalidParameter("networkProfile", "At least one network interface is required.")
	}
	for _, n := range nics {
		id := str(n.(map[string]any), "id")
		if e := s.requireRef(r, id, kindNIC); e != nil {
			return e
		}
		if vm := refID(s.lookup(id).props(), "virtualMachine"); vm != "" && !strings.EqualFold(vm, r.idStr) && s.lookup(vm) != nil {
			return errorf(http.StatusBadRequest, "NicInUse", "Network interface %s is already attached to virtual machine %s.", id, vm)
		}
	}
	// Effects, now that everything is valid.
	if old != nil {
		p["vmId"] = old.props()["vmId"]
		obj(storage, "osDisk")["managedDisk"] = get(old.props(), "storageProfile", "osDisk", "managedDisk")
		obj(storage, "osDisk")["name"] = str(old.props(), "storageProfile", "osDisk", "name")
	} else {
		p["vmId"] = newUUID()
		s.createOSDisk(r, obj(storage, "osDisk"), os)
	}
	for _, n := range nics {
		nic := s.lookup(str(n.(map[string]any), "id"))
		nic.props()["virtualMachine"] = map[string]any{"id": r.idStr}
		nic.touch()
	}
	return nil
}

// unchangeable refuses a PUT that changes what Azure fixes when it creates
// a VM: the image, the zones, the computer and admin user names (the Compute
// REST spec: "This name cannot be updated after the VM is created", "This
// property cannot be updated after the VM is created") and the OS disk it
// made. Azure answers 409 PropertyChangeNotAllowed naming the property.
func unchangeable(old, r *resource) *armError {
	op, np := old.props(), r.props()
	same := func(a, b any) bool {
		x, _ := jsonString(a)
		y, _ := jsonString(b)
		return strings.EqualFold(x, y)
	}
	for _, c := range []struct {
		name string
		a, b any
	}{
		{"imageReference", get(op, "storageProfile", "imageReference"), get(np, "storageProfile", "imageReference")},
		{"zones", old.body["zones"], r.body["zones"]},
		{"osProfile.computerName", get(op, "osProfile", "computerName"), get(np, "osProfile", "computerName")},
		{"osProfile.adminUsername", get(op, "osProfile", "adminUsername"), get(np, "osProfile", "adminUsername")},
		{"osDisk.osType", get(op, "storageProfile", "osDisk", "osType"), get(np, "storageProfile", "osDisk", "osType")},
	} {
		if !same(c.a, c.b) {
			e := errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property '%s' is not allowed.", c.name)
			e.Target = c.name
			return e
		}
	}
	if n := str(np, "storageProfile", "osDisk", "name"); n != "" && !strings.EqualFold(n, str(op, "storageProfile", "osDisk", "name")) {
		e := errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'osDisk.name' is not allowed.")
		e.Target = "osDisk.name"
		return e
	}
	return nil
}

func (s *Server) validateZones(r *resource) *armError {
	zones := list(r.body, "zones")
	loc := locations[normalizeLocation(str(r.body, "location"))]
	for _, z := range zones {
		zs, _ := z.(string)
		ok := false
		for _, have := range loc.zones {
			ok = ok || have == zs
		}
		if !ok {
			return invalidParameter("zones", "The zone(s) '%v' for resource '%s' is not supported. The supported zones for location '%s' are '%s'.", z, r.id.Name(), str(r.body, "location"), strings.Join(loc.zones, ","))
		}
	}
	return nil
}

func (s *Server) createOSDisk(vm *resource, osDisk map[string]any, os string) {
	name := str(osDisk, "name")
	if name == "" {
		name = fmt.Sprintf("%s_OsDisk_1_%s", vm.id.Name(), strings.ReplaceAll(newUUID(), "-", ""))
		osDisk["name"] = name
	}
	size, _ := osDisk["diskSizeGB"].(float64)
	diskID := resourceID{Subscription: vm.id.Subscription, ResourceGroup: vm.id.ResourceGroup, Namespace: "Microsoft.Compute", Types: []string{"disks"}, Names: []string{name}}
	storageType := str(osDisk, "managedDisk", "storageAccountType")
	if storageType == "" {
		storageType = "Premium_LRS"
	}
	md := obj(osDisk, "managedDisk")
	md["id"] = diskID.String()
	md["storageAccountType"] = storageType
	disk := newResource(diskID, kinds[strings.ToLower(kindDisk)], map[string]any{
		"location": vm.body["location"],
		"sku":      map[string]any{"name": storageType},
		"properties": map[string]any{
			"osType": os, "diskSizeGB": size, "diskState": "Attached", "provisioningState": "Succeeded",
			"creationData": map[string]any{"createOption": "FromImage"},
		},
	})
	if z, ok := vm.body["zones"]; ok {
		disk.body["zones"] = z
	}
	disk.body["managedBy"] = vm.idStr
	disk.etag = newETag()
	s.resources[key(disk.idStr)] = disk
}

func vmReady(s *Server, r *resource) ([]Machine, *armError) {
	if f := s.provisioningFailure(r.id.Name()); f != nil {
		return nil, f.asError(r.id.Name())
	}
	p := r.props()
	return []Machine{s.machineOf(r, str(r.body, "location"), obj(p, "storageProfile"), obj(p, "osProfile"), list(p, "networkProfile", "networkInterfaces"), r.secrets, "", "")}, nil
}

// machineOf describes a provisioned VM or instance for the runtime.
func (s *Server) machineOf(r *resource, location string, storage, osProfile map[string]any, nicRefs []any, secrets map[string]any, scaleSet, instance string) Machine {
	m := Machine{
		ID: r.idStr, Name: r.id.Name(), ResourceGroup: r.id.ResourceGroup, Location: location,
		ComputerName: str(osProfile, "computerName"), OS: osOf(storage),
		VMSize: str(r.props(), "hardwareProfile", "vmSize"), AdminUsername: str(osProfile, "adminUsername"),
		ScaleSet: scaleSet, InstanceID: instance,
	}
	if sz, ok := vmSizes[m.VMSize]; ok {
		m.VCPUs, m.MemoryGB = sz.vCPUs, sz.memoryGB
	}
	if z := list(r.body, "zones"); len(z) > 0 {
		m.Zone, _ = z[0].(string)
	}
	ref, _ := storage["imageReference"].(map[string]any)
	m.Image = ImageReference{Publisher: str(ref, "publisher"), Offer: str(ref, "offer"), SKU: str(ref, "sku"), Version: str(ref, "version"),
		ID: str(ref, "id"), CommunityGalleryImageID: str(ref, "communityGalleryImageId"), SharedGalleryImageID: str(ref, "sharedGalleryImageId")}
	for _, k := range list(osProfile, "linuxConfiguration", "ssh", "publicKeys") {
		m.SSHPublicKeys = append(m.SSHPublicKeys, str(k.(map[string]any), "keyData"))
	}
	if cd, ok := secrets["customData"].(string); ok {
		m.CustomData, _ = base64.StdEncoding.DecodeString(cd)
	}
	for _, n := range nicRefs {
		nic := s.lookup(str(n.(map[string]any), "id"))
		if nic == nil {
			continue
		}
		for _, c := range list(nic.props(), "ipConfigurations") {
			cp := obj(c.(map[string]any), "properties")
			if ip := str(cp, "privateIPAddress"); ip != "" {
				m.PrivateIPs = append(m.PrivateIPs, ip)
			}
			if pip := s.lookup(refID(cp, "publicIPAddress")); pip != nil {
				m.PublicIPs = append(m.PublicIPs, str(pip.props(), "ipAddress"))
			}
			for _, ref := range list(cp, "loadBalancerInboundNatRules") {
				if rule, ok := s.natRule(str(ref.(map[string]any), "id")); ok {
					m.InboundNAT = append(m.InboundNAT, rule)
				}
			}
		}
	}
	return m
}

// natRule resolves an inbound NAT rule to its frontend's public address.
func (s *Server) natRule(id string) (NATRule, bool) {
	r := s.lookup(id)
	if r == nil {
		return NATRule{}, false
	}
	p := r.props()
	parent, _ := r.id.Parent()
	lb := s.lookup(parent.String())
	if lb == nil {
		return NATRule{}, false
	}
	fe, _ := subRefName(lb, refID(p, "frontendIPConfiguration"), "frontendIPConfigurations")
	for _, f := range list(lb.props(), "frontendIPConfigurations") {
		fm := f.(map[string]any)
		if !strings.EqualFold(str(fm, "name"), fe) {
			continue
		}
		pip := s.lookup(refID(fm, "properties", "publicIPAddress"))
		front, _ := p["frontendPort"].(float64)
		back, _ := p["backendPort"].(float64)
		if pip == nil || str(pip.props(), "ipAddress") == "" || front == 0 || back == 0 {
			return NATRule{}, false
		}
		return NATRule{Name: r.id.Name(), Frontend: net.JoinHostPort(str(pip.props(), "ipAddress"), strconv.Itoa(int(front))), BackendPort: int(back)}, true
	}
	return NATRule{}, false
}

// vmDeleted detaches (or, with deleteOption Delete, deletes) the VM's NICs
// and OS disk, as Azure does when a VM goes.
func vmDeleted(s *Server, r *resource) []string {
	p := r.props()
	for _, n := range list(p, "networkProfile", "networkInterfaces") {
		nm := n.(map[string]any)
		nic := s.lookup(str(nm, "id"))
		if nic == nil {
			continue
		}
		delete(nic.props(), "virtualMachine")
		nic.touch()
		if strings.EqualFold(str(nm, "properties", "deleteOption"), "Delete") {
			delete(s.resources, key(nic.idStr))
		}
	}
	osDisk := obj(obj(p, "storageProfile"), "osDisk")
	if disk := s.lookup(str(osDisk, "managedDisk", "id")); disk != nil {
		if strings.EqualFold(str(osDisk, "deleteOption"), "Delete") {
			delete(s.resources, key(disk.idStr))
		} else {
			delete(disk.body, "managedBy")
			disk.props()["diskState"] = "Unattached"
			disk.touch()
		}
	}
	return nil
}

func diskAttached(s *Server, r *resource) *armError {
	if vm := str(r.body, "managedBy"); vm != "" && s.lookup(vm) != nil {
		return errorf(http.StatusConflict, "OperationNotAllowed", "Disk %s is attached to VM %s.", r.id.Name(), vm)
	}
	return nil
}

func (s *Server) serveInstanceView(w http.ResponseWriter, id resourceID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.lookup(id.String())
	if r == nil {
		writeError(w, notFound(id))
		return
	}
	writeJSON(w, http.StatusOK, s.instanceView(r))
}

func (s *Server) instanceView(r *resource) map[string]any {
	state := strings.ToLower(r.provisioningState())
	if r.deleting {
		state = "deleting"
	}
	statuses := []any{map[string]any{"code": "ProvisioningState/" + state, "level": "Info", "displayStatus": "Provisioning " + state}}
	if state == "failed" {
		statuses[0] = map[string]any{"code": "ProvisioningState/failed", "level": "Error", "displayStatus": "Provisioning failed"}
	}
	power := "PowerState/" + powerState(r)
	statuses = append(statuses, map[string]any{"code": power, "level": "Info", "displayStatus": strings.TrimPrefix(power, "PowerState/")})
	if msg, ok := r.secrets["bootError"].(string); ok {
		statuses = append(statuses, map[string]any{"code": "BootStatus/failed", "level": "Error", "displayStatus": "Boot failed", "message": msg})
	}
	osProfile := obj(r.props(), "osProfile")
	return map[string]any{"computerName": str(osProfile, "computerName"), "osName": osOf(obj(r.props(), "storageProfile")), "statuses": statuses}
}

// Scale sets.

func putVMSS(s *Server, r, old *resource) *armError {
	sku := obj(r.body, "sku")
	if _, ok := vmSizes[str(sku, "name")]; !ok {
		return invalidParameter("sku.name", "The value %s provided for the VM size is not valid.", str(sku, "name"))
	}
	capacity, _ := sku["capacity"].(float64)
	if capacity < 0 || capacity > 1000 {
		return invalidParameter("sku.capacity", "The capacity %v is outside 0 to 1000.", capacity)
	}
	sku["capacity"] = capacity
	if e := s.validateZones(r); e != nil {
		return e
	}
	p := r.props()
	if str(p, "orchestrationMode") == "" {
		p["orchestrationMode"] = "Uniform"
	}
	if str(p, "upgradePolicy", "mode") == "" {
		obj(p, "upgradePolicy")["mode"] = "Manual"
	}
	profile := obj(p, "virtualMachineProfile")
	storage := obj(profile, "storageProfile")
	osProfile := obj(profile, "osProfile")
	// A scale set's model may change its custom data; instances take it
	// when upgraded.
	os, e := s.checkProfile(r, nil, storage, osProfile, "computerNamePrefix", 9, 58)
	if e != nil {
		return e
	}
	nicConfs := list(profile, "networkProfile", "networkInterfaceConfigurations")
	if len(nicConfs) == 0 {
		return invalidParameter("networkInterfaceConfigurations", "At least one network interface configuration is required.")
	}
	for _, nc := range nicConfs {
		for _, ipc := range list(nc.(map[string]any), "properties", "ipConfigurations") {
			ip := obj(ipc.(map[string]any), "properties")
			if e := s.requireRef(r, refID(ip, "subnet"), kindSubnet); e != nil {
				return e
			}
			for _, ref := range list(ip, "loadBalancerBackendAddressPools") {
				if e := s.requireLBPart(r, str(ref.(map[string]any), "id"), "backendAddressPools"); e != nil {
					return e
				}
			}
		}
	}
	if old != nil {
		if osOf(obj(get(old.props(), "virtualMachineProfile").(map[string]any), "storageProfile")) != os {
			return errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'osType' is not allowed.")
		}
		// A scale set's names are fixed at creation, as a VM's are.
		for _, f := range []string{"computerNamePrefix", "adminUsername"} {
			if str(get(old.props(), "virtualMachineProfile").(map[string]any), "osProfile", f) != str(osProfile, f) {
				e := errorf(http.StatusConflict, "PropertyChangeNotAllowed", "Changing property 'osProfile.%s' is not allowed.", f)
				e.Target = "osProfile." + f
				return e
			}
		}
		r.secrets["nextInstance"] = old.secrets["nextInstance"]
		p["uniqueId"] = old.props()["uniqueId"]
		// A new model leaves existing instances behind until they are
		// upgraded (or replaced).
		if modelOf(old) != modelOf(r) {
			for _, inst := range s.children(r.id, "virtualMachines") {
				inst.props()["latestModelApplied"] = false
				inst.touch()
			}
		}
	} else {
		p["uniqueId"] = newUUID()
	}
	// The new model is stored before instances are made from it.
	s.resources[key(r.idStr)] = r
	return s.scaleTo(r, int(capacity))
}

func modelOf(r *resource) string {
	b, _ := jsonString(get(r.props(), "virtualMachineProfile"))
	cd, _ := r.secrets["customData"].(string)
	return b + "|" + cd
}

// scaleTo adds instances (new IDs) or removes the highest-numbered ones
// until the scale set has n.
func (s *Server) scaleTo(vmss *resource, n int) *armError {
	insts := s.liveInstances(vmss)
	for len(insts) > n {
		last := insts[len(insts)-1]
		last.deleting = true
		last.touch()
		insts = insts[:len(insts)-1]
		// Removed when the scale set's operation completes.
	}
	for len(insts) < n {
		inst, e := s.newInstance(vmss)
		if e != nil {
			return e
		}
		insts = append(insts, inst)
	}
	return nil
}

func (s *Server) liveInstances(vmss *resource) []*resource {
	var out []*resource
	for _, inst := range s.children(vmss.id, "virtualMachines") {
		if !inst.deleting {
			out = append(out, inst)
		}
	}
	// By instance ID, numerically.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && instanceNum(out[j]) < instanceNum(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func instanceNum(r *resource) int {
	n, _ := strconv.Atoi(r.id.Name())
	return n
}

// computerNameSuffix is the six base-36 characters a scale set appends to
// its computer-name prefix.
func computerNameSuffix(n int) string {
	s := strconv.FormatInt(int64(n), 36)
	return strings.Repeat("0", 6-len(s)) + s
}

func (s *Server) newInstance(vmss *resource) (*resource, *armError) {
	next, _ := vmss.secrets["nextInstance"].(float64)
	vmss.secrets["nextInstance"] = next + 1
	vmss.touch()
	n := int(next)
	id := vmss.id.Child("virtualMachines", strconv.Itoa(n))
	profile := obj(vmss.props(), "virtualMachineProfile")
	osProfile := deepCopy(obj(profile, "osProfile"))
	osProfile["computerName"] = str(osProfile, "computerNamePrefix") + computerNameSuffix(n)
	delete(osProfile, "computerNamePrefix")
	// An instance's SKU is its size, as Azure returns it: the scale set's
	// capacity is not the instance's (and a map shared with the scale set
	// would change the instance behind its back).
	sku := map[string]any{"name": str(vmss.body, "sku", "name")}
	if tier := str(vmss.body, "sku", "tier"); tier != "" {
		sku["tier"] = tier
	}
	inst := newResource(id, kinds[strings.ToLower(kindInstance)], map[string]any{
		"location": vmss.body["location"],
		"sku":      sku,
		"properties": map[string]any{
			"latestModelApplied": true,
			"vmId":               newUUID(),
			"hardwareProfile":    map[string]any{"vmSize": str(vmss.body, "sku", "name")},
			"storageProfile":     deepCopy(obj(profile, "storageProfile")),
			"osProfile":          osProfile,
		},
	})
	inst.body["name"] = vmss.id.Name() + "_" + strconv.Itoa(n)
	inst.body["instanceId"] = strconv.Itoa(n)
	if z := list(vmss.body, "zones"); len(z) > 0 {
		inst.body["zones"] = []any{z[n%len(z)]}
	}
	inst.setState("Creating")
	inst.etag = newETag()
	s.resources[key(inst.idStr)] = inst
	var nicRefs []any
	for _, nc := range list(profile, "networkProfile", "networkInterfaceConfigurations") {
		ncm := nc.(map[string]any)
		nicID := id.Child("networkInterfaces", str(ncm, "name"))
		nic := newResource(nicID, kinds[strings.ToLower(kindInstanceNIC)], map[string]any{
			"location":   vmss.body["location"],
			"properties": map[string]any{"ipConfigurations": deepCopy(map[string]any{"l": list(ncm, "properties", "ipConfigurations")})["l"], "virtualMachine": map[string]any{"id": inst.idStr}},
		})
		if e := s.fillIPConfigurations(nic, list(nic.props(), "ipConfigurations"), nil); e != nil {
			delete(s.resources, key(inst.idStr))
			return nil, e
		}
		nic.setState("Succeeded")
		nic.etag = newETag()
		s.resources[key(nicID.String())] = nic
		nicRefs = append(nicRefs, map[string]any{"id": nicID.String()})
	}
	inst.props()["networkProfile"] = map[string]any{"networkInterfaces": nicRefs}
	for k, v := range vmss.secrets {
		if k == "customData" || k == "adminPassword" {
			inst.secrets[k] = v
		}
	}
	return inst, nil
}

// vmssReady finishes the scale set's operation: instances being created are
// provisioned and booted, instances scaled in are removed.
func vmssReady(s *Server, r *resource) ([]Machine, *armError) {
	var boot []Machine
	for _, inst := range s.children(r.id, "virtualMachines") {
		if inst.deleting {
			s.stopLater = append(s.stopLater, s.removeResource(inst)...)
			continue
		}
		if inst.provisioningState() != "Creating" {
			continue
		}
		if f := s.provisioningFailure(str(inst.body, "name")); f != nil {
			inst.setState("Failed")
			continue
		}
		inst.setState("Succeeded")
		boot = append(boot, s.instanceMachine(r, inst))
	}
	return boot, nil
}

func (s *Server) instanceMachine(vmss, inst *resource) Machine {
	p := inst.props()
	return s.machineOf(inst, str(vmss.body, "location"), obj(p, "storageProfile"), obj(p, "osProfile"), list(p, "networkProfile", "networkInterfaces"), inst.secrets, vmss.id.Name(), inst.id.Name())
}

// instanceDeleting lowers the scale set's capacity as soon as an instance's
// deletion is accepted, as Azure does, so that a model update racing the
// deletion does not bring the instance back.
func instanceDeleting(s *Server, r *resource) *armError {
	parent, _ := r.id.Parent()
	if vmss := s.lookup(parent.String()); vmss != nil && !vmss.deleting && !r.deleting {
		sku := obj(vmss.body, "sku")
		if c, _ := sku["capacity"].(float64); c > 0 {
			sku["capacity"] = c - 1
			vmss.touch()
		}
	}
	return nil
}

// serveAction handles POST actions: a scale set's delete (of instances) and
// manualupgrade, and a VM's or instance's restart.
func (s *Server) serveAction(w http.ResponseWriter, r *http.Request, id resourceID, action string, body map[string]any) {
	s.mu.Lock()
	res := s.lookup(id.String())
	if res == nil {
		s.mu.Unlock()
		writeError(w, notFound(id))
		return
	}
	if powerActions[action] != "" && (res.kind.typ == kindVM || res.kind.typ == kindInstance || res.kind.typ == kindVMSS) {
		s.mu.Unlock()
		s.servePower(w, r, id, res, action, body)
		return
	}
	if res.kind.typ != kindVMSS || (action != "delete" && action != "manualupgrade") {
		s.mu.Unlock()
		writeError(w, errorf(http.StatusBadRequest, "OperationNotSupported", "The emulator does not support action '%s' on %s.", action, res.kind.typ))
		return
	}
	var targets []*resource
	for _, iid := range list(body, "instanceIds") {
		is, _ := iid.(string)
		inst := s.lookup(id.Child("virtualMachines", is).String())
		if inst == nil || inst.deleting {
			s.mu.Unlock()
			writeError(w, errorf(http.StatusBadRequest, "InvalidParameter", "The provided instanceId %s is not an active Virtual Machine Scale Set VM instanceId.", is))
			return
		}
		targets = append(targets, inst)
	}
	if len(targets) == 0 {
		s.mu.Unlock()
		writeError(w, invalidParameter("instanceIds", "At least one instance ID is required."))
		return
	}
	op := s.startOperation(w, r, id.Subscription, id.Namespace, str(res.body, "location"))
	var stop []string
	if action == "delete" {
		for _, t := range targets {
			_ = instanceDeleting(s, t)
			t.deleting = true
			t.touch()
		}
	} else {
		for _, t := range targets {
			if t.booted {
				stop = append(stop, t.idStr)
			}
			t.setState("Updating")
			t.booted, t.up = false, false
			delete(t.secrets, "power")
			// The instance takes the scale set's current model.
			profile := obj(res.props(), "virtualMachineProfile")
			t.props()["storageProfile"] = deepCopy(obj(profile, "storageProfile"))
			t.props()["latestModelApplied"] = true
			for k, v := range res.secrets {
				if k == "customData" || k == "adminPassword" {
					t.secrets[k] = v
				}
			}
		}
	}
	delay := s.opts.OperationDelay + bootDelay(s, res)
	s.after(delay, func() {
		s.mu.Lock()
		var boot []Machine
		var stopNow []string
		for _, t := range targets {
			if action == "delete" {
				stopNow = append(stopNow, s.removeResource(t)...)
				continue
			}
			if s.lookup(t.idStr) == t && !t.deleting {
				t.setState("Succeeded")
				boot = append(boot, s.instanceMachine(res, t))
			}
		}
		s.finishOperation(op, nil)
		s.mu.Unlock()
		s.stopMachines(stopNow)
		s.bootMachines(boot)
	})
	s.mu.Unlock()
	s.stopMachines(stop)
	w.WriteHeader(http.StatusAccepted)
}
