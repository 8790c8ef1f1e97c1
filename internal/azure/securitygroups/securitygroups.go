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

// Reconcile creates or updates the NSG with exactly the spec's rules. An
// existing NSG without the ownership tags of spec.Tags is refused with a
// *tags.NotOwnedError, never changed.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.c.Get(ctx, spec.ResourceGroup, spec.Name, nil)
		if err != nil {
			return false, async.IgnoreNotFound(err)
		}
		if err := tags.CheckOwned("network security group", spec.Name, spec.Tags, cur.Tags); err != nil {
			return false, err
		}
		return async.Succeeded(cur.Properties.ProvisioningState) && sameRules(cur.Properties.SecurityRules, spec.Rules), nil
	}, func(tok string) (*runtime.Poller[armnetwork.SecurityGroupsClientCreateOrUpdateResponse], error) {
		return s.c.BeginCreateOrUpdate(ctx, spec.ResourceGroup, spec.Name, model(spec), &armnetwork.SecurityGroupsClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

func model(spec Spec) armnetwork.SecurityGroup {
	var rules []*armnetwork.SecurityRule
	for _, r := range spec.Rules {
		src := r.Source
		if src == "" {
			src = "*"
		}
		rules = append(rules, &armnetwork.SecurityRule{Name: to.Ptr(r.Name), Properties: &armnetwork.SecurityRulePropertiesFormat{
			Protocol: to.Ptr(armnetwork.SecurityRuleProtocol(r.Protocol)), Direction: to.Ptr(armnetwork.SecurityRuleDirection(r.Direction)),
			Access: to.Ptr(armnetwork.SecurityRuleAccess(r.Access)), Priority: to.Ptr(r.Priority),
			SourceAddressPrefix: to.Ptr(src), SourcePortRange: to.Ptr("*"),
			DestinationAddressPrefix: to.Ptr("*"), DestinationPortRange: to.Ptr(r.DestinationPorts),
		}})
	}
	return armnetwork.SecurityGroup{Location: to.Ptr(spec.Location), Tags: spec.Tags, Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: rules}}
}

func sameRules(cur []*armnetwork.SecurityRule, want []Rule) bool {
	if len(cur) != len(want) {
		return false
	}
	have := map[string]*armnetwork.SecurityRule{}
	for _, r := range cur {
		have[strings.ToLower(*r.Name)] = r
	}
	for _, w := range want {
		r := have[strings.ToLower(w.Name)]
		if r == nil || r.Properties == nil || r.Properties.Priority == nil || *r.Properties.Priority != w.Priority ||
			r.Properties.DestinationPortRange == nil || *r.Properties.DestinationPortRange != w.DestinationPorts {
			return false
		}
	}
	return true
}

// Delete deletes the NSG.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.SecurityGroupsClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armnetwork.SecurityGroupsClientBeginDeleteOptions{ResumeToken: tok})
	})
}
