// Package securitygroups manages network security groups and their rules.
package securitygroups

import (
	"context"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

// Rule is one security rule; an empty address or port range is "*".
type Rule struct {
	Name             string
	Protocol         string // Tcp, Udp, *
	Direction        string // Inbound, Outbound
	Priority         int32
	Source           string
	SourcePorts      string
	Destination      string
	DestinationPorts string
	Access           string // Allow, Deny
	// Description is the user's, after winkube's mark.
	Description string
}

// Spec is an NSG.
type Spec struct {
	ResourceGroup, Name, Location string
	Rules                         []Rule
	Tags                          map[string]*string
}

// ResourceRef and OwnerTags make a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref        { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }
func (s Spec) OwnerTags() map[string]*string { return s.Tags }

// Parameters makes the spec's rules part of the NSG. The NSG is shared:
// cloud-provider-azure adds an allow rule per LoadBalancer Service port to
// the NSG azure.json names, and users add their own. So the PUT is built
// from what Azure has (Merged), keeping every rule that is not winkube's,
// and the reconciler sends it with the NSG's ETag (If-Match), so that a
// rule added between the read and the write is not lost. Nil when the NSG
// is provisioned with the spec's rules as they are.
func (s Spec) Parameters(existing *armnetwork.SecurityGroup) (*armnetwork.SecurityGroup, error) {
	if existing != nil && existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) && RulesUpToDate(existing, s.Rules) {
		return nil, nil
	}
	body := Merged(s, existing)
	return &body, nil
}

// Service manages NSGs.
type Service struct {
	kind *async.Kind[armnetwork.SecurityGroup]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewSecurityGroupsClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armnetwork.SecurityGroup]{
		Noun: "network security group",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.SecurityGroup, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.SecurityGroup, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.SecurityGroup, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armnetwork.SecurityGroupsClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armnetwork.SecurityGroupsClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(g *armnetwork.SecurityGroup) *string { return g.Etag },
		Tags: func(g *armnetwork.SecurityGroup) map[string]*string { return g.Tags },
	}}, nil
}

// Get returns the NSG, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.SecurityGroup, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile makes the NSG what Parameters says. A rule winkube wrote before
// (its description says so) that the spec no longer has is removed. An
// existing NSG without the ownership tags of spec.Tags is refused with a
// *tags.NotOwnedError, never changed.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Reconcile(ctx, s.kind, spec, token)
}

// ManagedDescription marks the rules winkube wrote: Azure keeps a rule's
// description, so the mark survives a manager's restart and clusterctl
// move, where a record in status would not.
const ManagedDescription = "Managed by winkube."

// Merged is the PUT body for a spec given the NSG as Azure has it (nil
// when it does not exist): its rules that are not winkube's, then the
// spec's.
func Merged(spec Spec, existing *armnetwork.SecurityGroup) armnetwork.SecurityGroup {
	want := map[string]bool{}
	for _, r := range spec.Rules {
		want[strings.ToLower(r.Name)] = true
	}
	var rules []*armnetwork.SecurityRule
	if existing != nil && existing.Properties != nil {
		for _, r := range existing.Properties.SecurityRules {
			if r.Name == nil || want[strings.ToLower(*r.Name)] || managed(r) {
				continue
			}
			rules = append(rules, r)
		}
	}
	for _, r := range spec.Rules {
		rules = append(rules, &armnetwork.SecurityRule{Name: to.Ptr(r.Name), Properties: ruleProperties(r)})
	}
	out := armnetwork.SecurityGroup{Location: to.Ptr(spec.Location), Tags: spec.Tags, Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: rules}}
	if existing != nil && existing.Properties != nil {
		// What else the NSG carries (flush connection, and so on) stays.
		props := *existing.Properties
		props.SecurityRules = rules
		props.DefaultSecurityRules = nil
		props.NetworkInterfaces, props.Subnets, props.FlowLogs = nil, nil, nil
		out.Properties = &props
		out.Tags = tags.Merge(existing.Tags, spec.Tags)
	}
	return out
}

func managed(r *armnetwork.SecurityRule) bool {
	if r.Properties == nil || r.Properties.Description == nil {
		return false
	}
	d := *r.Properties.Description
	return d == ManagedDescription || strings.HasPrefix(d, ManagedDescription+" ")
}

func ruleProperties(r Rule) *armnetwork.SecurityRulePropertiesFormat {
	orAny := func(v string) *string {
		if v == "" {
			v = "*"
		}
		return to.Ptr(v)
	}
	desc := ManagedDescription
	if r.Description != "" {
		desc += " " + r.Description
	}
	return &armnetwork.SecurityRulePropertiesFormat{
		Description: to.Ptr(desc),
		Protocol:    to.Ptr(armnetwork.SecurityRuleProtocol(r.Protocol)), Direction: to.Ptr(armnetwork.SecurityRuleDirection(r.Direction)),
		Access: to.Ptr(armnetwork.SecurityRuleAccess(r.Access)), Priority: to.Ptr(r.Priority),
		SourceAddressPrefix: orAny(r.Source), SourcePortRange: orAny(r.SourcePorts),
		DestinationAddressPrefix: orAny(r.Destination), DestinationPortRange: orAny(r.DestinationPorts),
	}
}

// RulesUpToDate reports whether the NSG has every rule of the spec as the
// spec says and none that winkube wrote and the spec dropped; rules of
// others do not matter.
func RulesUpToDate(nsg *armnetwork.SecurityGroup, want []Rule) bool {
	if nsg.Properties == nil {
		return false
	}
	have := map[string]*armnetwork.SecurityRule{}
	for _, r := range nsg.Properties.SecurityRules {
		if r.Name != nil {
			have[strings.ToLower(*r.Name)] = r
		}
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[strings.ToLower(w.Name)] = true
		r := have[strings.ToLower(w.Name)]
		if r == nil || r.Properties == nil || !sameRule(r.Properties, ruleProperties(w)) {
			return false
		}
	}
	for name, r := range have {
		if managed(r) && !wanted[name] {
			return false
		}
	}
	return true
}

func sameRule(a, b *armnetwork.SecurityRulePropertiesFormat) bool {
	s := func(p *string) string {
		if p == nil {
			return ""
		}
		return strings.ToLower(*p)
	}
	return a.Priority != nil && *a.Priority == *b.Priority && s(a.DestinationPortRange) == s(b.DestinationPortRange) &&
		a.Protocol != nil && strings.EqualFold(string(*a.Protocol), string(*b.Protocol)) &&
		a.Access != nil && strings.EqualFold(string(*a.Access), string(*b.Access)) &&
		a.Direction != nil && strings.EqualFold(string(*a.Direction), string(*b.Direction)) &&
		s(a.SourceAddressPrefix) == s(b.SourceAddressPrefix) && s(a.SourcePortRange) == s(b.SourcePortRange) &&
		s(a.DestinationAddressPrefix) == s(b.DestinationAddressPrefix) && ptrString(a.Description) == ptrString(b.Description)
}

// Delete deletes the NSG.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
