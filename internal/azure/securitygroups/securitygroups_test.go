package securitygroups_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/securitygroups"
)

var owned = map[string]*string{"sigs.k8s.io_cluster-api-provider-azure_cluster_demo": to.Ptr("owned")}

func spec(rules ...securitygroups.Rule) securitygroups.Spec {
	return securitygroups.Spec{ResourceGroup: "rg", Name: "node-nsg", Location: azuretest.Location, Rules: rules, Tags: owned}
}

var ssh = securitygroups.Rule{Name: "allow_ssh", Protocol: "Tcp", Direction: "Inbound", Priority: 2200, DestinationPorts: "22", Access: "Allow"}

// cloudProviderRule is a rule as cloud-provider-azure writes one for a
// LoadBalancer Service: not winkube's.
func cloudProviderRule(client *armnetwork.SecurityRulesClient, t *testing.T) {
	t.Helper()
	p, err := client.BeginCreateOrUpdate(context.Background(), "rg", "node-nsg", "a1b2c3-TCP-80-Internet", armnetwork.SecurityRule{Properties: &armnetwork.SecurityRulePropertiesFormat{
		Protocol: to.Ptr(armnetwork.SecurityRuleProtocolTCP), Access: to.Ptr(armnetwork.SecurityRuleAccessAllow), Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound),
		Priority: to.Ptr[int32](500), SourceAddressPrefix: to.Ptr("Internet"), SourcePortRange: to.Ptr("*"),
		DestinationAddressPrefix: to.Ptr("20.1.2.3"), DestinationPortRange: to.Ptr("80")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, client *armnetwork.SecurityGroupsClient) map[string]int32 {
	t.Helper()
	nsg, err := client.Get(context.Background(), "rg", "node-nsg", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, r := range nsg.Properties.SecurityRules {
		out[*r.Name] = *r.Properties.Priority
	}
	return out
}

// The cloud provider's rules on the node NSG survive every reconcile of
// winkube's own rules, including one that changes them (CAPZ #578,
// kubernetes #90611: a PUT of only the spec's rules took Services dark).
func TestReconcileKeepsRulesItDoesNotOwn(t *testing.T) {
	cfg := azuretest.Start(t, "rg")
	svc, err := securitygroups.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nsgs, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewSecurityGroupsClient)
	rules, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewSecurityRulesClient)
	ctx := context.Background()
	reconcile := func(s securitygroups.Spec) error {
		return azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, s, tok) })
	}
	if err := reconcile(spec(ssh)); err != nil {
		t.Fatal(err)
	}
	cloudProviderRule(rules, t)

	// A resync with the same spec leaves the NSG alone.
	before, _ := nsgs.Get(ctx, "rg", "node-nsg", nil)
	if err := reconcile(spec(ssh)); err != nil {
		t.Fatal(err)
	}
	after, _ := nsgs.Get(ctx, "rg", "node-nsg", nil)
	if *before.Etag != *after.Etag {
		t.Error("a reconcile with nothing to change wrote the NSG")
	}

	// A changed spec: winkube's rule moves, a new one comes, the cloud
	// provider's stays.
	moved := ssh
	moved.Priority = 2201
	rdp := securitygroups.Rule{Name: "allow_rdp", Protocol: "Tcp", Direction: "Inbound", Priority: 2202, DestinationPorts: "3389", Access: "Allow"}
	if err := reconcile(spec(moved, rdp)); err != nil {
		t.Fatal(err)
	}
	got := names(t, nsgs)
	if got["a1b2c3-TCP-80-Internet"] != 500 || got["allow_ssh"] != 2201 || got["allow_rdp"] != 2202 {
		t.Errorf("rules after a spec change: %v", got)
	}

	// A rule winkube wrote and the spec dropped goes; the others stay.
	if err := reconcile(spec(moved)); err != nil {
		t.Fatal(err)
	}
	got = names(t, nsgs)
	if _, ok := got["allow_rdp"]; ok || got["a1b2c3-TCP-80-Internet"] != 500 || len(got) != 2 {
		t.Errorf("rules after dropping allow_rdp from the spec: %v", got)
	}
}

// The write is conditional on what was read: Azure answers 412 when the
// NSG changed in between, and nothing is overwritten.
func TestParametersAreWrittenOnlyOverWhatWasRead(t *testing.T) {
	cfg := azuretest.Start(t, "rg")
	svc, _ := securitygroups.New(azuretest.Subscription, cfg)
	nsgs, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewSecurityGroupsClient)
	rules, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewSecurityRulesClient)
	ctx := context.Background()
	if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec(ssh), tok) }); err != nil {
		t.Fatal(err)
	}
	read, err := nsgs.Get(ctx, "rg", "node-nsg", nil)
	if err != nil {
		t.Fatal(err)
	}
	cloudProviderRule(rules, t) // lands between the read and the write
	moved := ssh
	moved.Priority = 2300
	_, err = nsgs.BeginCreateOrUpdate(ctxIfMatch(ctx, read.Etag), "rg", "node-nsg", securitygroups.Merged(spec(moved), &read.SecurityGroup), nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("a write over a stale read: %v, want 412", err)
	}
	if got := names(t, nsgs); got["a1b2c3-TCP-80-Internet"] != 500 {
		t.Errorf("the rule added in between is gone: %v", got)
	}
}

// A user's rule reaches Azure as written: its source ports, destination
// and description too (they were sent as "*" and dropped, so an allow rule
// was broader than asked), and a change of any of them is written.
func TestUserRulesAreSentAsWritten(t *testing.T) {
	cfg := azuretest.Start(t, "rg")
	ctx := context.Background()
	svc, err := securitygroups.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nsgs, err := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewSecurityGroupsClient)
	if err != nil {
		t.Fatal(err)
	}
	metrics := securitygroups.Rule{Name: "allow_metrics", Protocol: "Tcp", Direction: "Inbound", Priority: 2300, Access: "Allow",
		Source: "10.0.0.0/16", SourcePorts: "1024-65535", Destination: "10.1.0.0/16", DestinationPorts: "9100", Description: "node exporter, from the control plane"}
	read := func() *armnetwork.SecurityRulePropertiesFormat {
		t.Helper()
		nsg, err := nsgs.Get(ctx, "rg", "node-nsg", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range nsg.Properties.SecurityRules {
			if *r.Name == "allow_metrics" {
				return r.Properties
			}
		}
		t.Fatal("the user's rule is not in the NSG")
		return nil
	}
	if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec(ssh, metrics), tok) }); err != nil {
		t.Fatal(err)
	}
	got := read()
	if *got.SourcePortRange != "1024-65535" || *got.DestinationAddressPrefix != "10.1.0.0/16" || *got.SourceAddressPrefix != "10.0.0.0/16" ||
		*got.Description != securitygroups.ManagedDescription+" node exporter, from the control plane" {
		t.Fatalf("the rule in Azure is not the one written: source ports %s, destination %s, description %q",
			*got.SourcePortRange, *got.DestinationAddressPrefix, *got.Description)
	}
	for _, change := range []func(*securitygroups.Rule){
		func(r *securitygroups.Rule) { r.Destination = "10.2.0.0/16" },
		func(r *securitygroups.Rule) { r.SourcePorts = "*" },
		func(r *securitygroups.Rule) { r.Access = "Deny" },
		func(r *securitygroups.Rule) { r.Description = "" },
	} {
		change(&metrics)
		if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec(ssh, metrics), tok) }); err != nil {
			t.Fatal(err)
		}
		got := read()
		if *got.DestinationAddressPrefix != "10.2.0.0/16" || *got.SourcePortRange != metricsOr(metrics.SourcePorts) || string(*got.Access) != metrics.Access ||
			*got.Description != strings.TrimSpace(securitygroups.ManagedDescription+" "+metrics.Description) {
			t.Fatalf("an edit of the rule did not reach Azure: %+v", got)
		}
	}
}

func metricsOr(v string) string {
	if v == "" {
		return "*"
	}
	return v
}
