package cloudprovider

import (
	"crypto/md5" //nolint:gosec // a rule's name, as cloud-provider-azure derives it
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The network security group rules cloud-provider-azure writes for
// LoadBalancer Services, as of kubernetes-sigs/cloud-provider-azure v1.36.5
// (9da15999f3742db71ab75a6366b62454911fe5b7):
//
//   - pkg/provider/azure_loadbalancer.go reconcileSecurityGroup: on the NSG
//     azure.json names (securityGroupName in securityGroupResourceGroup,
//     defaulting to resourceGroup: pkg/provider/azure.go), first the
//     Service's destinations are taken out of the managed rules (ports that
//     other Services share kept), then its allow rules are added, then
//     every managed rule keeps only destinations some Service or node
//     still has; the NSG is PUT whole when that changed anything.
//   - The destinations: with floating IP disabled
//     (service.beta.kubernetes.io/azure-disable-load-balancer-floating-ip)
//     the backend nodes' private addresses and the node ports
//     (pkg/provider/loadbalancer/accesscontrol.go
//     SecurityRuleDestinationPortsByProtocol); with it enabled the load
//     balancer's frontend addresses and the Service's ports.
//   - pkg/provider/securitygroup/securitygroup.go: one allow rule per
//     protocol, IP family, sources and ports, named
//     k8s-azure-lb_allow_<IPv4|IPv6>_<md5 hex of "<protocol>_<sorted
//     sources joined by ,>_<sorted ports joined by ,>">, whose destinations
//     collect every Service's with the same sources and ports; priority the
//     first free from 500 up (k8s-azure-lb_deny-all_<family> the first free
//     from 4095 down); a rule is the cloud provider's only when its name
//     starts with k8s-azure-lb and its priority is within 500..4096
//     (IsManagedSecurityRule): no other rule is touched; a rule left
//     without destinations is dropped.
//   - The sources (pkg/provider/loadbalancer/accesscontrol.go
//     PatchSecurityGroup, configuration.go): spec.loadBalancerSourceRanges
//     and the annotations service.beta.kubernetes.io/azure-allowed-ip-ranges
//     and service.beta.kubernetes.io/load-balancer-source-ranges (the first
//     and the annotations together are refused), the service tags of
//     service.beta.kubernetes.io/azure-allowed-service-tags, and Internet
//     when the Service is open to it (public, no ranges narrower than
//     0.0.0.0/0, no service tags); an internal Service gets no Internet
//     rule: the VNet reaches it through AllowVnetInBound.
//     service.beta.kubernetes.io/azure-deny-all-except-load-balancer-source-ranges
//     adds the deny-all rule for its destinations;
//     service.beta.kubernetes.io/azure-disable-load-balancer-nsg-rule
//     writes no allow rule.
//   - service.beta.kubernetes.io/azure-shared-securityrule is read by no
//     code path of this reconciliation (its helper useSharedSecurityRule
//     had no caller, and was removed in 1fb8674b9, "cleanup: remove unused
//     load balancer production paths"): rules are shared by their sources
//     and ports, whatever the annotation says. It is ignored here too.
const (
	nsgRulePrefix   = "k8s-azure-lb"
	nsgRuleSep      = "_"
	nsgMinPriority  = 500
	nsgMaxPriority  = 4096
	serviceTagInet  = "Internet"
	familyIPv4      = "IPv4"
	annoAllowedTags = "service.beta.kubernetes.io/azure-allowed-service-tags"
	annoAllowedIPs  = "service.beta.kubernetes.io/azure-allowed-ip-ranges"
	annoDenyAll     = "service.beta.kubernetes.io/azure-deny-all-except-load-balancer-source-ranges"
	annoNoNSGRule   = "service.beta.kubernetes.io/azure-disable-load-balancer-nsg-rule"
	// AnnotationDisableFloatingIP: the simulation's rules always have
	// floating IP off (build), so its NSG rules are those of a Service
	// carrying it.
	AnnotationDisableFloatingIP = "service.beta.kubernetes.io/azure-disable-load-balancer-floating-ip"
)

// Security rule protocols, in the order cloud-provider-azure walks them.
var nsgProtocols = []string{"Tcp", "Udp", "*"}

// nsgProtocol is a Service port's protocol as a security rule's
// (securitygroup.ProtocolFromKubernetes).
func nsgProtocol(p corev1.Protocol) (string, error) {
	switch p {
	case corev1.ProtocolTCP, "":
		return "Tcp", nil
	case corev1.ProtocolUDP:
		return "Udp", nil
	case corev1.ProtocolSCTP:
		return "*", nil
	}
	return "", fmt.Errorf("unsupported protocol %s", p)
}

// isManaged is IsManagedSecurityRule.
func isManaged(r *SecurityRule) bool {
	return strings.HasPrefix(r.Name, nsgRulePrefix) && r.Priority >= nsgMinPriority && r.Priority <= nsgMaxPriority
}

// allowRuleName is GenerateAllowSecurityRuleName.
func allowRuleName(proto, family string, sources []string, ports []int32) string {
	srcs := slices.Clone(sources)
	sort.Strings(srcs)
	ps := portStrings(ports)
	h := md5.Sum([]byte(strings.Join([]string{proto, strings.Join(srcs, ","), strings.Join(ps, ",")}, "_"))) //nolint:gosec
	return strings.Join([]string{nsgRulePrefix, "allow", family, fmt.Sprintf("%x", h)}, nsgRuleSep)
}

func portStrings(ports []int32) []string {
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		out = append(out, strconv.Itoa(int(p)))
	}
	sort.Strings(out)
	return out
}

// destinations of a rule, singular and plural.
func (r *SecurityRule) destinations() []string {
	var out []string
	if r.DestinationPrefix != "" {
		out = append(out, r.DestinationPrefix)
	}
	return append(out, r.DestinationPrefixes...)
}

func (r *SecurityRule) sources() []string {
	var out []string
	if r.SourcePrefix != "" {
		out = append(out, r.SourcePrefix)
	}
	return append(out, r.SourcePrefixes...)
}

// setDestinations is SetDestinationPrefixes: deduplicated and sorted, one
// in the singular property, several in the plural.
func (r *SecurityRule) setDestinations(ps []string) {
	set := map[string]bool{}
	for _, p := range ps {
		set[p] = true
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	r.DestinationPrefix, r.DestinationPrefixes = "", nil
	if len(out) == 1 {
		r.DestinationPrefix = out[0]
	} else {
		r.DestinationPrefixes = out
	}
}

// ports of a rule as numbers; ok is false for "*" or ranges, which the
// cloud provider never writes in allow rules and leaves alone.
func (r *SecurityRule) ports() ([]int32, bool) {
	vals := append([]string(nil), r.DestinationPortRanges...)
	if r.DestinationPortRange != "" {
		vals = append([]string{r.DestinationPortRange}, vals...)
	}
	out := make([]int32, 0, len(vals))
	for _, v := range vals {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return nil, false
		}
		out = append(out, int32(n))
	}
	return out, true
}

// ruleSet is the NSG's rules by name and priority while they are changed
// (securitygroup.RuleHelper).
type ruleSet struct {
	rules      map[string]*SecurityRule
	priorities map[int32]string
}

func newRuleSet(sg *SecurityGroup) *ruleSet {
	rs := &ruleSet{rules: map[string]*SecurityRule{}, priorities: map[int32]string{}}
	for i := range sg.Rules {
		r := sg.Rules[i]
		rs.rules[r.Name] = &r
		rs.priorities[r.Priority] = r.Name
	}
	return rs
}

var errPriorityExhausted = errors.New("security rule priority exhausted")

// getOrCreate is getOrCreateRule: an existing rule keeps its priority, a
// new one takes the first free from the start (500 up) or the end (4095
// down).
func (rs *ruleSet) getOrCreate(name string, fromEnd bool) (*SecurityRule, error) {
	if r, ok := rs.rules[name]; ok {
		return r, nil
	}
	start, end, step := int32(nsgMinPriority), int32(nsgMaxPriority), int32(1)
	if fromEnd {
		start, end, step = nsgMaxPriority-1, nsgMinPriority-1, -1
	}
	for p := start; p != end; p += step {
		if _, used := rs.priorities[p]; used {
			continue
		}
		r := &SecurityRule{Name: name, Priority: p}
		rs.rules[name], rs.priorities[p] = r, name
		return r, nil
	}
	return nil, errPriorityExhausted
}

// addAllow is addAllowRule.
func (rs *ruleSet) addAllow(proto string, sources, dsts []string, ports []int32) error {
	r, err := rs.getOrCreate(allowRuleName(proto, familyIPv4, sources, ports), false)
	if err != nil {
		return err
	}
	r.Protocol, r.Access, r.Direction = proto, "Allow", "Inbound"
	if len(sources) == 1 {
		r.SourcePrefix = sources[0]
	} else {
		r.SourcePrefixes = slices.Clone(sources)
	}
	r.SourcePortRange = "*"
	r.setDestinations(append(r.destinations(), dsts...))
	r.DestinationPortRange, r.DestinationPortRanges = "", portStrings(ports)
	return nil
}

// addDenyAll is AddRuleForDenyAll.
func (rs *ruleSet) addDenyAll(dsts []string) error {
	r, err := rs.getOrCreate(strings.Join([]string{nsgRulePrefix, "deny-all", familyIPv4}, nsgRuleSep), true)
	if err != nil {
		return err
	}
	r.Protocol, r.Access, r.Direction = "*", "Deny", "Inbound"
	r.SourcePrefix, r.SourcePrefixes, r.SourcePortRange = "*", nil, "*"
	r.setDestinations(append(slices.Clone(dsts), r.destinations()...))
	r.DestinationPortRange, r.DestinationPortRanges = "*", nil
	return nil
}

// removeDestination is RemoveDestinationFromRules for one protocol: dsts
// leave the managed rules, except from the ports retain keeps (another
// Service's), which get a rule of their own.
func (rs *ruleSet) removeDestination(proto string, dsts []string, retain []int32) error {
	names := make([]string, 0, len(rs.rules))
	for n := range rs.rules {
		names = append(names, n)
	}
	sort.Strings(names)
	drop := map[string]bool{}
	for _, d := range dsts {
		drop[d] = true
	}
	for _, n := range names {
		r := rs.rules[n]
		if !isManaged(r) || r.Protocol != proto {
			continue
		}
		cur := r.destinations()
		var keep, target []string
		for _, d := range cur {
			if drop[d] {
				target = append(target, d)
			} else {
				keep = append(keep, d)
			}
		}
		if strings.EqualFold(r.Access, "Deny") && len(retain) == 0 {
			r.setDestinations(keep)
			continue
		}
		ports, ok := r.ports()
		if !ok {
			continue
		}
		var kept []int32
		for _, p := range ports {
			if slices.Contains(retain, p) {
				kept = append(kept, p)
			}
		}
		if len(target) == 0 || len(ports) == len(kept) {
			continue
		}
		r.setDestinations(keep)
		if len(kept) > 0 {
			if err := rs.addAllow(r.Protocol, r.sources(), dsts, kept); err != nil {
				return err
			}
		}
	}
	return nil
}

// retain is RetainDestinationFromRules: managed rules keep only the
// destinations in keep.
func (rs *ruleSet) retain(keep []string) {
	set := map[string]bool{}
	for _, k := range keep {
		set[k] = true
	}
	for _, r := range rs.rules {
		if !isManaged(r) {
			continue
		}
		cur := r.destinations()
		var out []string
		for _, d := range cur {
			if set[d] {
				out = append(out, d)
			}
		}
		if len(out) != len(cur) {
			r.setDestinations(out)
		}
	}
}

// result is the NSG's rules after the changes, by priority, rules left
// without destinations dropped.
func (rs *ruleSet) result() []SecurityRule {
	var out []SecurityRule
	for _, r := range rs.rules {
		if len(r.destinations()) == 0 && !r.DestinationASGs {
			continue
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Priority < out[j].Priority })
	return out
}

// accessControl is what a Service asks of the NSG
// (loadbalancer.AccessControl).
type accessControl struct {
	sourceRanges, allowedIPRanges []netip.Prefix
	serviceTags                   []string
	invalid                       []string
	ports                         map[string][]int32
}

func parseRanges(vals []string) ([]netip.Prefix, []string) {
	var ok []netip.Prefix
	var bad []string
	for _, v := range vals {
		v = strings.TrimSpace(v)
		p, err := netip.ParsePrefix(v)
		if err != nil {
			bad = append(bad, v)
			continue
		}
		ok = append(ok, p.Masked())
	}
	return ok, bad
}

func newAccessControl(s *corev1.Service, disableFloatingIP bool) (*accessControl, error) {
	ac := &accessControl{ports: map[string][]int32{}}
	var bad []string
	ac.sourceRanges, bad = parseRanges(s.Spec.LoadBalancerSourceRanges)
	ac.invalid = append(ac.invalid, bad...)
	for _, k := range []string{annoAllowedIPs, corev1.AnnotationLoadBalancerSourceRangesKey} {
		if v, ok := s.Annotations[k]; ok {
			r, bad := parseRanges(strings.Split(strings.TrimSpace(v), ","))
			ac.allowedIPRanges = append(ac.allowedIPRanges, r...)
			ac.invalid = append(ac.invalid, bad...)
		}
	}
	if v, ok := s.Annotations[annoAllowedTags]; ok {
		for _, t := range strings.Split(strings.TrimSpace(v), ",") {
			ac.serviceTags = append(ac.serviceTags, strings.TrimSpace(t))
		}
	}
	for _, p := range s.Spec.Ports {
		proto, err := nsgProtocol(p.Protocol)
		if err != nil {
			return nil, err
		}
		port := p.Port
		if disableFloatingIP {
			port = p.NodePort
		}
		ac.ports[proto] = append(ac.ports[proto], port)
	}
	if len(ac.sourceRanges) > 0 && len(ac.allowedIPRanges) > 0 {
		return nil, &specError{fmt.Sprintf("cannot set both spec.LoadBalancerSourceRanges and service annotation %s", annoAllowedIPs)}
	}
	return ac, nil
}

func allowsAll(ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Bits() == 0 })
}

// allowFromInternet is IsAllowFromInternet.
func (ac *accessControl) allowFromInternet(internalLB bool) bool {
	switch {
	case len(ac.serviceTags) > 0,
		len(ac.sourceRanges) > 0 && !allowsAll(ac.sourceRanges),
		len(ac.allowedIPRanges) > 0 && !allowsAll(ac.allowedIPRanges),
		len(ac.invalid) > 0:
		return false
	case !internalLB:
		return true
	}
	return len(ac.allowedIPRanges) > 0 || len(ac.sourceRanges) > 0
}

// denyAllExceptSourceRanges is DenyAllExceptSourceRanges.
func (ac *accessControl) denyAllExceptSourceRanges(s *corev1.Service) bool {
	on := strings.EqualFold(s.Annotations[annoDenyAll], "true")
	return (on && (len(ac.sourceRanges) > 0 || len(ac.allowedIPRanges) > 0)) || len(ac.invalid) > 0
}

// aggregate drops the ranges another range contains
// (iputil.AggregatePrefixes also merges adjacent ones, which the rule's
// effect does not depend on).
func aggregate(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		covered := false
		for j, q := range ps {
			if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) && (q.Bits() < p.Bits() || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

// patch is PatchSecurityGroup for IPv4 destinations.
func (ac *accessControl) patch(rs *ruleSet, s *corev1.Service, dsts []string) error {
	ranges := aggregate(append(slices.Clone(ac.sourceRanges), ac.allowedIPRanges...))
	tags := slices.Clone(ac.serviceTags)
	if ac.allowFromInternet(internal(s)) && !allowsAll(ac.allowedIPRanges) && !allowsAll(ac.sourceRanges) {
		tags = append(tags, serviceTagInet)
	}
	var sources []string
	for _, r := range ranges {
		if r.Addr().Is4() {
			sources = append(sources, r.String())
		}
	}
	for _, proto := range nsgProtocols {
		ports, ok := ac.ports[proto]
		if !ok || len(dsts) == 0 {
			continue
		}
		for _, t := range tags {
			if err := rs.addAllow(proto, []string{t}, dsts, ports); err != nil {
				return err
			}
		}
		if len(sources) > 0 {
			if err := rs.addAllow(proto, sources, dsts, ports); err != nil {
				return err
			}
		}
	}
	if ac.denyAllExceptSourceRanges(s) && len(dsts) > 0 {
		return rs.addDenyAll(dsts)
	}
	return nil
}

// nsgChange is one Service's reconciliation of the NSG.
type nsgChange struct {
	svc *corev1.Service
	// want is false when the Service's rules go (it was deleted or is no
	// LoadBalancer any more).
	want bool
	// dsts are the Service's destinations (floating IP off: the backend
	// nodes' private addresses).
	dsts []netip.Addr
	// retain are the ports, by protocol, of the other Services whose rules
	// share these destinations.
	retain map[string][]int32
	// managed are every destination some Service or node still has.
	managed []netip.Addr
}

// reconcileRules is reconcileSecurityGroup's work on the rules: the
// NSG's rules afterwards, and whether they changed.
func reconcileRules(sg *SecurityGroup, ch nsgChange) ([]SecurityRule, bool, error) {
	before := snapshot(sg.Rules)
	rs := newRuleSet(sg)
	ac, err := newAccessControl(ch.svc, true)
	if err != nil {
		if ch.want {
			return nil, false, err
		}
		ac = &accessControl{ports: map[string][]int32{}}
	}
	var dsts []string
	for _, d := range ch.dsts {
		if d.Is4() {
			dsts = append(dsts, d.String())
		}
	}
	for _, proto := range nsgProtocols {
		if err := rs.removeDestination(proto, dsts, ch.retain[proto]); err != nil {
			return nil, false, err
		}
	}
	if ch.want && !strings.EqualFold(ch.svc.Annotations[annoNoNSGRule], "true") {
		if err := ac.patch(rs, ch.svc, dsts); err != nil {
			return nil, false, err
		}
	}
	var keep []string
	for _, m := range append(slices.Clone(ch.managed), ch.dsts...) {
		keep = append(keep, m.String())
	}
	rs.retain(keep)
	out := rs.result()
	return out, snapshot(out) != before, nil
}

func snapshot(rules []SecurityRule) string {
	rs := slices.Clone(rules)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Priority < rs[j].Priority })
	b, _ := json.Marshal(rs)
	return string(b)
}
