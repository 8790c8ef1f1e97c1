// Package securitygroups manages network security groups and their rules.
package securitygroups

import (
	"context"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

// Rule is one security rule.
type Rule struct {
	Name             string
	Protocol         string // Tcp, Udp, *
	Direction        string // Inbound, Outbound
	Priority         int32
	Source           string
	DestinationPorts string
	Access           string // Allow, Deny
}

// Spec is an NSG.
type Spec struct {
	ResourceGroup, Name, Location string
	Rules                         []Rule
	Tags                          map[string]*string
}

// Service manages NSGs.
type Service struct {
	c *armnetwork.SecurityGroupsClient
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewSecurityGroupsClient)
	return &Service{c: c}, err
}

// Get returns the NSG, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.SecurityGroup, error) {
	cur, err := s.c.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.SecurityGroup, nil
}

// Reconcile makes the spec's rules part of the NSG. The NSG is shared:
// cloud-provider-azure adds an allow rule per LoadBalancer Service port to
// the NSG azure.json names, and users add their own. So the PUT is built
// from what Azure has, keeping every rule that is not winkube's, and sent
// with the NSG's ETag (If-Match), so that a rule added between the read
// and the write is not lost: Azure answers 412 and the next reconcile reads
// again. A rule winkube wrote before (its description says so) that the
// spec no longer has is removed. An existing NSG without the ownership tags
// of spec.Tags is refused with a *tags.NotOwnedError, never changed.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	var existing *armnetwork.SecurityGroup
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.c.Get(ctx, spec.ResourceGroup, spec.Name, nil)
		if err != nil {
			return false, async.IgnoreNotFound(err)
		}
		if err := tags.CheckOwned("network security group", spec.Name, spec.Tags, cur.Tags); err != nil {
			return false, err
		}
		existing = &cur.SecurityGroup
		return async.Succeeded(cur.Properties.ProvisioningState) && RulesUpToDate(existing, spec.Rules), nil
	}, func(tok string) (*runtime.Poller[armnetwork.SecurityGroupsClientCreateOrUpdateResponse], error) {
		return s.c.BeginCreateOrUpdate(async.IfMatch(ctx, etag(existing)), spec.ResourceGroup, spec.Name, Parameters(spec, existing), &armnetwork.SecurityGroupsClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// ManagedDescription marks the rules winkube wrote: Azure keeps a rule's
// description, so the mark survives a manager's restart and clusterctl
// move, where a record in status would not.
const ManagedDescription = "Managed by winkube."

// Parameters is the PUT body for a spec given the NSG as Azure has it (nil
// when it does not exist): its rules that are not winkube's, then the
// spec's.
func Parameters(spec Spec, existing *armnetwork.SecurityGroup) armnetwork.SecurityGroup {
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
	}
	return out
}

func managed(r *armnetwork.SecurityRule) bool {
	return r.Properties != nil && r.Properties.Description != nil && *r.Properties.Description == ManagedDescription
}

func ruleProperties(r Rule) *armnetwork.SecurityRulePropertiesFormat {
	src := r.Source
	if src == "" {
		src = "*"
	}
	return &armnetwork.SecurityRulePropertiesFormat{
		Description: to.Ptr(ManagedDescription),
		Protocol:    to.Ptr(armnetwork.SecurityRuleProtocol(r.Protocol)), Direction: to.Ptr(armnetwork.SecurityRuleDirection(r.Direction)),
		Access: to.Ptr(armnetwork.SecurityRuleAccess(r.Access)), Priority: to.Ptr(r.Priority),
		SourceAddressPrefix: to.Ptr(src), SourcePortRange: to.Ptr("*"),
		DestinationAddressPrefix: to.Ptr("*"), DestinationPortRange: to.Ptr(r.DestinationPorts),
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
		s(a.SourceAddressPrefix) == s(b.SourceAddressPrefix) && s(a.Description) == s(b.Description)
}

// Delete deletes the NSG.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.SecurityGroupsClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armnetwork.SecurityGroupsClientBeginDeleteOptions{ResumeToken: tok})
	})
}

func etag(nsg *armnetwork.SecurityGroup) *string {
	if nsg == nil {
		return nil
	}
	return nsg.Etag
}
