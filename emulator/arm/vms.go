package arm

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Virtual machines: the PUT's rules, the OS disk a VM gets, the machine
// handed to the runtime, and the instance view.

func putVM(s *Server, r, old *resource) *armError {
	p := r.props()
	size := str(p, "hardwareProfile", "vmSize")
	if _, ok := vmSizes[size]; !ok {
		return invalidParameter("vmSize", "The value %s provided for the VM size is not valid. The valid sizes in the current region are: %s.", size, strings.Join(sizeNames(), ", "))
	}
	if e := s.validateZones(r); e != nil {
		return e
	}
	if e := s.checkIdentity(r); e != nil {
		return e
	}
	storage := obj(p, "storageProfile")
	osProfile := obj(p, "osProfile")
	os, e := s.checkProfile(r, old, storage, osProfile, "computerName", 15, 64)
	if e != nil {
		return e
	}
	if old == nil {
		if e := checkOSDiskStorage(size, str(storage, "osDisk", "managedDisk", "storageAccountType"), str(storage, "osDisk", "name")); e != nil {
			return e
		}
		if e := checkGeneration(size, s.imageGeneration(obj(storage, "imageReference"))); e != nil {
			return e
		}
	}
	if old == nil || !strings.EqualFold(size, str(old.props(), "hardwareProfile", "vmSize")) {
		if e := s.checkSKUAvailable(r, size, list(r.body, "zones")); e != nil {
			return e
		}
	}
	if old != nil {
		if e := unchangeable(old, r); e != nil {
			return e
		}
	}
	if e := s.joinAvailabilitySet(r, old); e != nil {
		return e
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
		if e := checkAcceleratedNetworking(r, size, get(s.lookup(id).props(), "enableAcceleratedNetworking") == true, false); e != nil {
			return e
		}
	}
	dataDisks, e := s.planDataDisks(r, old, size)
	if e != nil {
		return e
	}
	// Effects, now that everything is valid.
	if e := s.applyIdentity(r, old); e != nil {
		return e
	}
	dataDisks()
	vmDefaults(p)
	if old != nil {
		p["vmId"] = old.props()["vmId"]
		obj(storage, "osDisk")["managedDisk"] = get(old.props(), "storageProfile", "osDisk", "managedDisk")
		obj(storage, "osDisk")["name"] = str(old.props(), "storageProfile", "osDisk", "name")
	} else {
		p["vmId"] = newUUID()
		s.createOSDisk(r, obj(storage, "osDisk"), os)
		s.addToAvailabilitySet(r)
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
	storageType := str(osDisk, "managedDisk", "storageAccountType")
	if storageType == "" {
		storageType = "Premium_LRS"
	}
	disk := s.newDisk(vm, name, storageType, map[string]any{
		"osType": os, "diskSizeGB": size, "creationData": map[string]any{"createOption": "FromImage"},
	})
	md := obj(osDisk, "managedDisk")
	md["id"] = disk.idStr
	md["storageAccountType"] = storageType
}

// vmReady ends a VM's operation. A failed one leaves the VM in state
// Failed with what it sent kept in its model (a data disk that failed to
// attach stays listed: MicrosoftDocs/azure-docs
// articles/virtual-machines/troubleshooting/troubleshoot-vm-deployment-detached.md,
// kubernetes-sigs/azuredisk-csi-driver #780), and a VM that ran keeps
// running; the instance view then names the failure. The next operation
// that succeeds returns the VM to Succeeded and boots it if its creation
// had failed.
func vmReady(s *Server, r *resource) ([]Machine, *armError) {
	dropDetached(r)
	ops := []string{}
	if r.secrets[secretMade] != "true" {
		ops = append(ops, OperationCreate)
	}
	if r.secrets[secretAttaching] == "true" {
		ops = append(ops, OperationAttachDataDisk)
	}
	delete(r.secrets, secretAttaching)
	e := (*armError)(nil)
	if f := s.provisioningFailure(r.id.Name(), ops...); f != nil {
		e = f.asError(r.id.Name())
	}
	p := r.props()
	if ref, _ := obj(p, "storageProfile")["imageReference"].(map[string]any); ref != nil && e == nil {
		e = s.planMissing(r, ref)
	}
	if e != nil {
		r.secrets[secretFailureCode], r.secrets[secretFailureMessage], r.secrets[secretFailureTime] = e.Code, e.Message, s.now().UTC().Format(time.RFC3339Nano)
		return nil, e
	}
	delete(r.secrets, secretFailureCode)
	delete(r.secrets, secretFailureMessage)
	delete(r.secrets, secretFailureTime)
	r.secrets[secretMade] = "true"
	return []Machine{s.machineOf(r, str(r.body, "location"), obj(p, "storageProfile"), obj(p, "osProfile"), list(p, "networkProfile", "networkInterfaces"), r.secrets, "", "")}, nil
}

// A VM's secrets ("true" or text): whether an operation of it ever
// succeeded, whether the operation under way attaches a data disk, and its
// last operation's failure.
const (
	secretMade           = "made"
	secretAttaching      = "attachingDataDisk"
	secretFailureCode    = "failureCode"
	secretFailureMessage = "failureMessage"
	secretFailureTime    = "failureTime"
)

// machineOf describes a provisioned VM or instance for the runtime.
func (s *Server) machineOf(r *resource, location string, storage, osProfile map[string]any, nicRefs []any, secrets map[string]any, scaleSet, instance string) Machine {
	m := Machine{
		ID: r.idStr, Name: r.id.Name(), ResourceGroup: r.id.ResourceGroup, Location: location,
		ComputerName: str(osProfile, "computerName"), OS: osOf(storage),
		VMSize: str(r.props(), "hardwareProfile", "vmSize"), AdminUsername: str(osProfile, "adminUsername"),
		ScaleSet: scaleSet, InstanceID: instance,
	}
	id := r.idStr
	m.Outbound = func(protocol string) (Egress, error) { return s.Outbound(id, protocol) }
	m.NextHop = func(dest netip.Addr) (Hop, error) { return s.NextHop(id, dest) }
	if scaleSet == "" {
		// Scale-set instances take no data disks of their own here
		// (updateInstance keeps their model the scale set's).
		m.DataDisks = func() []DataDisk { return s.dataDisksOf(id) }
	}
	m.IMDS = s.imdsURL(id)
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
// and OS and data disks, as Azure does when a VM goes.
func vmDeleted(s *Server, r *resource) []string {
	s.dropIdentity(r)
	s.leaveAvailabilitySet(r)
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
	s.dataDisksDeleted(r)
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
	if r.kind.typ == kindVMSS {
		writeJSON(w, http.StatusOK, s.scaleSetInstanceView(r))
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
		// ProvisioningState/<state>[/<errorCode>] (states-billing.md
		// @3255b21d), with the failed operation's message and time.
		st := map[string]any{"code": "ProvisioningState/failed", "level": "Error", "displayStatus": "Provisioning failed"}
		if code, ok := r.secrets[secretFailureCode].(string); ok {
			st["code"] = "ProvisioningState/failed/" + code
			st["message"], st["time"] = r.secrets[secretFailureMessage], r.secrets[secretFailureTime]
		}
		statuses[0] = st
	}
	power := "PowerState/" + powerState(r)
	statuses = append(statuses, map[string]any{"code": power, "level": "Info", "displayStatus": strings.TrimPrefix(power, "PowerState/")})
	if msg, ok := r.secrets["bootError"].(string); ok {
		statuses = append(statuses, map[string]any{"code": "BootStatus/failed", "level": "Error", "displayStatus": "Boot failed", "message": msg})
	}
	osProfile := obj(r.props(), "osProfile")
	view := domainsOf(r)
	view["computerName"], view["osName"], view["statuses"] = str(osProfile, "computerName"), osOf(obj(r.props(), "storageProfile")), statuses
	if s.bootDiagnosticsOn(r) {
		// Managed boot diagnostics leave the blob URIs out of the instance
		// view (retrieveBootDiagnosticsData hands them out), and its
		// status appears only when enabling them failed
		// (BootDiagnosticsInstanceView, bootdiagnostics.go).
		view["bootDiagnostics"] = map[string]any{}
	}
	return view
}
