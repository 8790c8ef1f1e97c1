package arm

import (
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"time"
)

// Load balancers' rules, probes and backend pools as Azure validates them
// (Microsoft.Network/loadBalancers, REST API 2023-x: loadBalancer.json), and
// the data-plane view a machine runtime programs its network from.

// Defaults from the REST API's descriptions of the properties.
const (
	defaultProbeInterval = 15 // seconds; "the default value is 15, the minimum value is 5"
	minProbeInterval     = 5
	defaultIdleTimeout   = 4 // minutes; "between 4 and 30 minutes. The default value is 4"
	maxIdleTimeout       = 30
)

// number reads an integer property; ok is false when it is absent.
func number(m map[string]any, k string) (int, bool, *armError) {
	v, present := m[k]
	if !present || v == nil {
		return 0, false, nil
	}
	f, isNum := v.(float64)
	if !isNum || f != float64(int(f)) {
		return 0, false, invalidParameter(k, "The value %v of %s is not an integer.", v, k)
	}
	return int(f), true, nil
}

func inRange(m map[string]any, k, owner string, lo, hi int, required bool) (int, *armError) {
	n, ok, e := number(m, k)
	if e != nil {
		return 0, e
	}
	if !ok {
		if required {
			return 0, invalidParameter(k, "%s: %s is required.", owner, k)
		}
		return 0, nil
	}
	if n < lo || n > hi {
		return 0, invalidParameter(k, "%s: %s %d is out of range; allowed values are %d to %d.", owner, k, n, lo, hi)
	}
	return n, nil
}

// oneOf checks an enum property (Azure compares them without regard to
// case) and writes back its canonical spelling; def is used when absent.
func oneOf(m map[string]any, k, owner, def string, allowed ...string) (string, *armError) {
	v, _ := m[k].(string)
	if v == "" {
		if def == "" {
			return "", invalidParameter(k, "%s: %s is required; allowed values are %s.", owner, k, strings.Join(allowed, ", "))
		}
		m[k] = def
		return def, nil
	}
	for _, a := range allowed {
		if strings.EqualFold(a, v) {
			m[k] = a
			return a, nil
		}
	}
	return "", invalidParameter(k, "%s: %s %q is not valid; allowed values are %s.", owner, k, v, strings.Join(allowed, ", "))
}

// lbSKU is the load balancer's SKU name; Azure's default is Basic.
func lbSKU(r *resource) string {
	sku := obj(r.body, "sku")
	if str(sku, "name") == "" {
		sku["name"] = "Basic"
	}
	return str(sku, "name")
}

// validateLBParts checks a load balancer's probes, backend pools and
// load-balancing rules; putLB has checked the frontends and given every
// part its ID.
func (s *Server) validateLBParts(r *resource, frontends, pools, probes map[string]bool) *armError {
	p := r.props()
	sku := lbSKU(r)
	for _, fe := range list(p, "frontendIPConfigurations") {
		pip := s.lookup(refID(fe.(map[string]any), "properties", "publicIPAddress"))
		if pip == nil {
			continue
		}
		if pipSKU := str(pip.body, "sku", "name"); pipSKU != "" && !strings.EqualFold(pipSKU, sku) {
			return errorf(http.StatusBadRequest, "DifferentSkuLoadBalancersAndPublicIPAddressNotAllowed",
				"Load balancer %s of SKU %s cannot reference public IP address %s of SKU %s: both SKUs must match.", r.idStr, sku, pip.idStr, pipSKU)
		}
	}
	for _, it := range list(p, "probes") {
		m := it.(map[string]any)
		if e := validateProbe(str(m, "name"), obj(m, "properties")); e != nil {
			return e
		}
	}
	for _, it := range list(p, "backendAddressPools") {
		m := it.(map[string]any)
		if e := s.validatePool(r, sku, m); e != nil {
			return e
		}
	}
	if e := s.validateOutboundRules(r, frontends, pools); e != nil {
		return e
	}
	type ruleKey struct{ fe, proto string }
	type backKey struct{ pool, proto string }
	type seenRule struct {
		name, fe string
		port     int
		floating bool
	}
	fronts := map[ruleKey][]seenRule{}
	backs := map[backKey][]seenRule{}
	for _, it := range list(p, "loadBalancingRules") {
		m := it.(map[string]any)
		name := str(m, "name")
		rp := obj(m, "properties")
		owner := "Load balancing rule " + name
		for prop, names := range map[string]map[string]bool{"frontendIPConfiguration": frontends, "backendAddressPool": pools, "probe": probes} {
			ref := refID(rp, prop)
			if ref == "" {
				if prop == "frontendIPConfiguration" {
					return invalidParameter(prop, "%s needs a frontendIPConfiguration.", owner)
				}
				continue
			}
			n, ok := subRefName(r, ref, lbCollection[prop])
			if !ok || !names[n] {
				return invalidReference(r.idStr+"/loadBalancingRules/"+name, ref)
			}
		}
		proto, e := oneOf(rp, "protocol", owner, "", "Tcp", "Udp", "All")
		if e != nil {
			return e
		}
		front, e := inRange(rp, "frontendPort", owner, 0, 65534, true)
		if e != nil {
			return e
		}
		back, e := inRange(rp, "backendPort", owner, 0, 65535, false)
		if e != nil {
			return e
		}
		if _, present := rp["backendPort"]; !present {
			rp["backendPort"] = float64(front)
			back = front
		}
		idle, e := inRange(rp, "idleTimeoutInMinutes", owner, defaultIdleTimeout, maxIdleTimeout, false)
		if e != nil {
			return e
		}
		if idle == 0 {
			rp["idleTimeoutInMinutes"] = float64(defaultIdleTimeout)
		}
		if _, e := oneOf(rp, "loadDistribution", owner, "Default", "Default", "SourceIP", "SourceIPProtocol"); e != nil {
			return e
		}
		floating, _ := rp["enableFloatingIP"].(bool)
		rp["enableFloatingIP"] = floating
		// A frontend is an address, a protocol and a port: two rules
		// cannot listen on the same one (All covers Tcp and Udp).
		fe := strings.ToLower(refID(rp, "frontendIPConfiguration"))
		this := seenRule{name: name, fe: fe, port: front, floating: floating}
		for _, pr := range overlapping(proto) {
			for _, o := range fronts[ruleKey{fe, pr}] {
				if o.port == front {
					return invalidParameter("frontendPort", "Load balancing rules %s and %s use the same frontend IP configuration, protocol and frontend port %d: a frontend port can be used by one rule only.", o.name, name, front)
				}
			}
		}
		fronts[ruleKey{fe, proto}] = append(fronts[ruleKey{fe, proto}], this)
		// Without floating IP, a backend tells flows of two rules apart by
		// its port only; with floating IP, by the frontend address too.
		pool := strings.ToLower(refID(rp, "backendAddressPool"))
		if pool == "" {
			continue
		}
		for _, pr := range overlapping(proto) {
			for _, o := range backs[backKey{pool, pr}] {
				if o.port != back {
					continue
				}
				switch {
				case !o.floating && !floating:
					return errorf(http.StatusBadRequest, "RulesUseSameBackendPortProtocolAndPool",
						"Load balancing rules %s and %s with floating IP disabled use the same protocol %s and backend port %d, and must not be used with the same backend address pool %s.",
						r.idStr+"/loadBalancingRules/"+o.name, r.idStr+"/loadBalancingRules/"+name, proto, back, refID(rp, "backendAddressPool"))
				case o.floating && floating && o.fe == fe:
					return errorf(http.StatusBadRequest, "RulesUseSameBackendPortProtocolAndPoolAndFrontendIPWithFloatingIPEnabled",
						"Load balancing rules %s and %s with floating IP enabled use the same protocol %s and backend port %d and frontend IP %s, and must not be used with the same backend address pool %s.",
						r.idStr+"/loadBalancingRules/"+o.name, r.idStr+"/loadBalancingRules/"+name, proto, back, refID(rp, "frontendIPConfiguration"), refID(rp, "backendAddressPool"))
				}
			}
		}
		this.port = back
		backs[backKey{pool, proto}] = append(backs[backKey{pool, proto}], this)
	}
	return nil
}

var lbCollection = map[string]string{"frontendIPConfiguration": "frontendIPConfigurations", "backendAddressPool": "backendAddressPools", "probe": "probes"}

// overlapping are the protocols whose flows a rule of proto also takes.
func overlapping(proto string) []string {
	if proto == "All" {
		return []string{"Tcp", "Udp", "All"}
	}
	return []string{proto, "All"}
}

func validateProbe(name string, p map[string]any) *armError {
	owner := "Probe " + name
	proto, e := oneOf(p, "protocol", owner, "", "Tcp", "Http", "Https")
	if e != nil {
		return e
	}
	if _, e := inRange(p, "port", owner, 1, 65535, true); e != nil {
		return e
	}
	interval, e := inRange(p, "intervalInSeconds", owner, minProbeInterval, 3600, false)
	if e != nil {
		return e
	}
	if interval == 0 {
		p["intervalInSeconds"] = float64(defaultProbeInterval)
	}
	if _, e := inRange(p, "probeThreshold", owner, 1, 100, false); e != nil {
		return e
	}
	if _, e := inRange(p, "numberOfProbes", owner, 1, 100, false); e != nil {
		return e
	}
	// "Path is required if a protocol is set to http. Otherwise, it is not
	// allowed."
	path := str(p, "requestPath")
	switch {
	case proto != "Tcp" && path == "":
		return invalidParameter("requestPath", "%s uses protocol %s and needs a requestPath.", owner, proto)
	case proto == "Tcp" && path != "":
		return invalidParameter("requestPath", "%s uses protocol Tcp: requestPath is not allowed.", owner)
	}
	return nil
}

// validatePool checks an IP-based pool's addresses. Azure allows NIC-based
// and IP-based pools on one load balancer but not both kinds of member in
// one pool, and IP-based pools on Standard load balancers only.
func (s *Server) validatePool(lb *resource, sku string, m map[string]any) *armError {
	addrs := list(m, "properties", "loadBalancerBackendAddresses")
	if len(addrs) == 0 {
		return nil
	}
	poolID := str(m, "id")
	if !strings.EqualFold(sku, "Standard") {
		return invalidParameter("loadBalancerBackendAddresses", "Backend address pool %s is IP-based: IP-based backend pools are available for Standard load balancers only, and %s is %s.", poolID, lb.idStr, sku)
	}
	if nics := s.nicsInPool(poolID); len(nics) > 0 {
		return invalidParameter("loadBalancerBackendAddresses", "Backend address pool %s has NIC members (%s): a backend pool holds NIC-based or IP-based members, not both.", poolID, nics[0].idStr)
	}
	// The VNet is the pool's (cloud-provider-azure sets it there) or each
	// address's (Azure's REST examples).
	poolVNet := refID(m, "properties", "virtualNetwork")
	if poolVNet != "" {
		if e := s.requireRef(lb, poolVNet, kindVNet); e != nil {
			return e
		}
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		am, _ := a.(map[string]any)
		ap := obj(am, "properties")
		ip, err := netip.ParseAddr(str(ap, "ipAddress"))
		if err != nil {
			return invalidParameter("ipAddress", "Backend address %s of pool %s: %q is not an IP address.", str(am, "name"), poolID, str(ap, "ipAddress"))
		}
		if seen[ip.String()] {
			return invalidParameter("ipAddress", "Backend address %s of pool %s repeats IP address %s.", str(am, "name"), poolID, ip)
		}
		seen[ip.String()] = true
		if vnet := refID(ap, "virtualNetwork"); vnet != "" {
			if e := s.requireRef(lb, vnet, kindVNet); e != nil {
				return e
			}
		} else if refID(ap, "subnet") == "" && poolVNet == "" {
			return invalidParameter("virtualNetwork", "Backend address %s of pool %s needs its virtualNetwork.", str(am, "name"), poolID)
		}
	}
	return nil
}

// nicsInPool are the NICs (VM and scale-set instance ones) whose IP
// configurations are members of a backend pool.
func (s *Server) nicsInPool(poolID string) []*resource {
	return s.nicsUsing(func(ipc map[string]any) bool {
		for _, ref := range list(ipc, "properties", "loadBalancerBackendAddressPools") {
			if m, ok := ref.(map[string]any); ok && strings.EqualFold(str(m, "id"), poolID) {
				return true
			}
		}
		return false
	})
}

// poolIsIPBased refuses a NIC joining a pool of IP addresses.
func (s *Server) poolIsIPBased(from *resource, poolID string) *armError {
	i := strings.Index(strings.ToLower(poolID), "/backendaddresspools/")
	if i < 0 {
		return nil
	}
	lb := s.lookup(poolID[:i])
	if lb == nil {
		return nil
	}
	for _, it := range list(lb.props(), "backendAddressPools") {
		m := it.(map[string]any)
		if strings.EqualFold(str(m, "id"), poolID) && len(list(m, "properties", "loadBalancerBackendAddresses")) > 0 {
			return invalidParameter("loadBalancerBackendAddressPools", "%s cannot join backend address pool %s: the pool is IP-based, and a backend pool holds NIC-based or IP-based members, not both.", from.idStr, poolID)
		}
	}
	return nil
}

// LBRule is one load-balancing rule as a data plane carries it: where
// connections arrive, and where they may go.
type LBRule struct {
	// ID is the rule's ARM ID.
	ID string
	// FrontendIP is the frontend's address: a public IP's, or for an
	// internal load balancer the frontend's private address in its subnet
	// (FrontendPrivate).
	FrontendIP      string
	FrontendPrivate bool
	FrontendPort    int
	// Protocol is Tcp, Udp or All.
	Protocol    string
	BackendPort int
	FloatingIP  bool
	// Distribution is Default (5-tuple hash), SourceIP (2-tuple) or
	// SourceIPProtocol (3-tuple).
	Distribution string
	IdleTimeout  time.Duration
	// Probe is nil for a rule without one.
	Probe *LBProbe
	// Backends are the private IP addresses of the pool's members: the NIC
	// IP configurations that joined it, or its IP addresses.
	Backends []string
	// Admission is, by backend address, what the NSGs of the backend's
	// subnet and NIC let in (nsg.go); a flow reaches a backend only where
	// Admits says so.
	Admission map[string]*Inbound
}

// LBProbe is a health probe as the data plane runs it.
type LBProbe struct {
	// Protocol is Tcp, Http or Https.
	Protocol string
	Port     int
	Path     string
	Interval time.Duration
	// Threshold is how many consecutive failures take a backend out.
	Threshold int
}

// LoadBalancingRules lists every load-balancing rule of every load balancer
// that has finished provisioning, sorted by ID.
func (s *Server) LoadBalancingRules() []LBRule {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LBRule
	for _, lb := range s.sortedResources() {
		if lb.kind.typ != kindLB || lb.deleting || lb.provisioningState() == "Failed" {
			continue
		}
		out = append(out, s.rulesOf(lb)...)
	}
	return out
}

func (s *Server) rulesOf(lb *resource) []LBRule {
	p := lb.props()
	part := func(prop, id string) map[string]any {
		for _, it := range list(p, prop) {
			if m, ok := it.(map[string]any); ok && strings.EqualFold(str(m, "id"), id) {
				return m
			}
		}
		return nil
	}
	var out []LBRule
	for _, it := range list(p, "loadBalancingRules") {
		m := it.(map[string]any)
		rp := obj(m, "properties")
		fe := part("frontendIPConfigurations", refID(rp, "frontendIPConfiguration"))
		if fe == nil {
			continue
		}
		rule := LBRule{ID: str(m, "id"), Protocol: str(rp, "protocol"), Distribution: str(rp, "loadDistribution")}
		if pip := s.lookup(refID(fe, "properties", "publicIPAddress")); pip != nil {
			rule.FrontendIP = str(pip.props(), "ipAddress")
		} else {
			rule.FrontendIP, rule.FrontendPrivate = str(fe, "properties", "privateIPAddress"), true
		}
		rule.FrontendPort, _, _ = number(rp, "frontendPort")
		rule.BackendPort, _, _ = number(rp, "backendPort")
		rule.FloatingIP, _ = rp["enableFloatingIP"].(bool)
		idle, _, _ := number(rp, "idleTimeoutInMinutes")
		rule.IdleTimeout = time.Duration(idle) * time.Minute
		if pr := part("probes", refID(rp, "probe")); pr != nil {
			pp := obj(pr, "properties")
			port, _, _ := number(pp, "port")
			interval, _, _ := number(pp, "intervalInSeconds")
			// numberOfProbes is not honoured by Azure (one unanswered probe
			// takes a backend out); probeThreshold replaced it.
			threshold, ok, _ := number(pp, "probeThreshold")
			if !ok {
				threshold = 1
			}
			rule.Probe = &LBProbe{Protocol: str(pp, "protocol"), Port: port, Path: str(pp, "requestPath"), Interval: time.Duration(interval) * time.Second, Threshold: threshold}
		}
		if pool := part("backendAddressPools", refID(rp, "backendAddressPool")); pool != nil {
			rule.Backends = s.poolMembers(pool)
			rule.Admission = s.admission(pool, rule, strings.EqualFold(lbSKU(lb), "Standard"))
		}
		out = append(out, rule)
	}
	return out
}

// poolMembers are the private addresses in a pool: its IP addresses, or
// the addresses of the NIC IP configurations that joined it.
func (s *Server) poolMembers(pool map[string]any) []string {
	seen := map[string]bool{}
	var out []string
	add := func(ip string) {
		if ip != "" && !seen[ip] {
			seen[ip] = true
			out = append(out, ip)
		}
	}
	for _, a := range list(pool, "properties", "loadBalancerBackendAddresses") {
		if am, ok := a.(map[string]any); ok {
			add(str(am, "properties", "ipAddress"))
		}
	}
	id := str(pool, "id")
	for _, nic := range s.nicsInPool(id) {
		if nic.deleting {
			continue
		}
		for _, ipc := range list(nic.props(), "ipConfigurations") {
			m, _ := ipc.(map[string]any)
			for _, ref := range list(m, "properties", "loadBalancerBackendAddressPools") {
				if rm, ok := ref.(map[string]any); ok && strings.EqualFold(str(rm, "id"), id) {
					add(str(m, "properties", "privateIPAddress"))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// DataPlane is implemented by a MachineRuntime that also carries the load
// balancers' traffic. The emulator calls ProgramLoadBalancers, from one
// goroutine, with every rule as it stands after writes that may have
// changed them (load balancers, NICs, scale sets and their instances,
// public IPs) and after machines boot.
type DataPlane interface {
	ProgramLoadBalancers(rules []LBRule)
}

// OnNetworkChange registers fn to be called, from one goroutine and never
// with the emulator's lock held, after successful writes that may change
// the load balancers' data plane. Calls are coalesced: fn may see several
// writes at once, and reads the state it needs (LoadBalancingRules).
func (s *Server) OnNetworkChange(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, fn)
	if s.netChanged == nil {
		s.netChanged = make(chan struct{}, 1)
		s.netDone = make(chan struct{})
		go s.notifyLoop()
	}
	s.signalNetwork()
}

// signalNetwork marks the network changed; the caller may hold s.mu.
func (s *Server) signalNetwork() {
	if s.netChanged == nil {
		return
	}
	select {
	case s.netChanged <- struct{}{}:
	default: // a notification is already pending and will see this change
	}
}

func (s *Server) notifyLoop() {
	unlock := func() {}
	defer func() { unlock() }()
	for {
		select {
		case <-s.netDone:
			return
		case <-s.netChanged:
		}
		unlock = s.lock()
		fns := append([]func(){}, s.listeners...)
		unlock()
		for _, fn := range fns {
			fn()
		}
	}
}

func (s *Server) stopNotify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.netDone != nil {
		select {
		case <-s.netDone:
		default:
			close(s.netDone)
		}
	}
}

// attachDataPlane wires a runtime that carries traffic to the emulator's
// changes.
func (s *Server) attachDataPlane() {
	dp, ok := s.opts.Runtime.(DataPlane)
	if !ok {
		return
	}
	s.OnNetworkChange(func() { dp.ProgramLoadBalancers(s.LoadBalancingRules()) })
}

func (r LBRule) String() string {
	return fmt.Sprintf("%s %s:%d -> %v:%d", r.Protocol, r.FrontendIP, r.FrontendPort, r.Backends, r.BackendPort)
}

// validateOutboundRules checks a Standard load balancer's outbound rules:
// their frontends and pool exist, and a load-balancing rule on a frontend
// an outbound rule uses turns its own SNAT off, since a backend's
// outbound connections may come from one of the two only
// (load-balancer/outbound-rules.md, "Limitations"; the code is Azure's,
// the message the emulator's).
func (s *Server) validateOutboundRules(r *resource, frontends, pools map[string]bool) *armError {
	p := r.props()
	outFronts := map[string]string{}
	for _, it := range list(p, "outboundRules") {
		m := it.(map[string]any)
		name := str(m, "name")
		rp := obj(m, "properties")
		if _, e := oneOf(rp, "protocol", "Outbound rule "+name, "", "Tcp", "Udp", "All"); e != nil {
			return e
		}
		ref := refID(rp, "backendAddressPool")
		if n, ok := subRefName(r, ref, "backendAddressPools"); !ok || !pools[n] {
			return invalidReference(r.idStr+"/outboundRules/"+name, ref)
		}
		fes := list(rp, "frontendIPConfigurations")
		if len(fes) == 0 {
			return invalidParameter("frontendIPConfigurations", "Outbound rule %s needs at least one frontend IP configuration.", name)
		}
		for _, fe := range fes {
			ref := str(fe.(map[string]any), "id")
			n, ok := subRefName(r, ref, "frontendIPConfigurations")
			if !ok || !frontends[n] {
				return invalidReference(r.idStr+"/outboundRules/"+name, ref)
			}
			outFronts[strings.ToLower(n)] = name
		}
	}
	for _, it := range list(p, "loadBalancingRules") {
		m := it.(map[string]any)
		rp := obj(m, "properties")
		fe, _ := subRefName(r, refID(rp, "frontendIPConfiguration"), "frontendIPConfigurations")
		if out, ok := outFronts[strings.ToLower(fe)]; ok && get(rp, "disableOutboundSnat") != true {
			return errorf(http.StatusBadRequest, "LoadBalancingRuleMustDisableSNATSinceSameFrontendIPConfigurationIsReferencedByOutboundRule",
				"Load balancing rule %s/loadBalancingRules/%s must disable SNAT (disableOutboundSnat) since frontend IP configuration %s is also used by outbound rule %s.", r.idStr, str(m, "name"), fe, out)
		}
	}
	return nil
}
