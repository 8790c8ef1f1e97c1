// Package nsgrules holds the security rules winkube puts in a cluster's
// NSGs, beside the user's own (spec.networkSpec.subnets[].securityGroup),
// and the rules a user rule must keep to so that Azure accepts the NSG.
package nsgrules

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/winkube/winkube/internal/azure/securitygroups"
)

// APIServerPort is the port of the API server behind its load balancer.
const APIServerPort = 6443

// ControlPlane are the control-plane subnet's rules: the API server from
// anywhere, SSH (through the load balancer's NAT rules), VXLAN inside the
// VNet.
func ControlPlane() []securitygroups.Rule {
	return []securitygroups.Rule{
		{Name: "allow_apiserver", Protocol: "Tcp", Direction: "Inbound", Priority: 2200, DestinationPorts: strconv.Itoa(APIServerPort), Access: "Allow"},
		{Name: "allow_ssh", Protocol: "Tcp", Direction: "Inbound", Priority: 2201, DestinationPorts: "22", Access: "Allow"},
		{Name: "allow_vxlan", Protocol: "Udp", Direction: "Inbound", Priority: 2202, Source: "VirtualNetwork", DestinationPorts: "4789", Access: "Allow"},
	}
}

// Node are a node subnet's rules: VXLAN inside the VNet, the kubelet and
// SSH from the control plane (cpSource, its subnet's range), RDP inside
// the VNet.
func Node(cpSource string) []securitygroups.Rule {
	return []securitygroups.Rule{
		{Name: "allow_vxlan", Protocol: "Udp", Direction: "Inbound", Priority: 2200, Source: "VirtualNetwork", DestinationPorts: "4789", Access: "Allow"},
		{Name: "allow_kubelet", Protocol: "Tcp", Direction: "Inbound", Priority: 2201, Source: cpSource, DestinationPorts: "10250", Access: "Allow"},
		{Name: "allow_ssh_from_controlplane", Protocol: "Tcp", Direction: "Inbound", Priority: 2202, Source: cpSource, DestinationPorts: "22", Access: "Allow"},
		{Name: "allow_rdp_in_vnet", Protocol: "Tcp", Direction: "Inbound", Priority: 2203, Source: "VirtualNetwork", DestinationPorts: "3389", Access: "Allow"},
	}
}

// MaxDescription is the longest description a user rule may have: Azure
// keeps at most 140 characters (armnetwork v7.2.0 models.go,
// SecurityRulePropertiesFormat.Description, from azure-rest-api-specs'
// networkSecurityGroup.json), and winkube's mark goes first.
const MaxDescription = 140 - len(securitygroups.ManagedDescription) - 1

// Conflict is why Azure would refuse a user's rule beside winkube's, or ""
// when it would not: a rule of the same name replaces winkube's, and two
// rules of one direction and priority are refused for the whole NSG
// ("SecurityRuleConflict: ... Rules cannot have the same Priority and
// Direction"), so the cluster's NSG would not be written at all.
func Conflict(builtin []securitygroups.Rule, name, direction string, priority int32) string {
	for _, b := range builtin {
		switch {
		case strings.EqualFold(b.Name, name):
			return fmt.Sprintf("the name %s is winkube's own rule (%s %s port %s, priority %d): choose another name", name, b.Direction, b.Protocol, b.DestinationPorts, b.Priority)
		case strings.EqualFold(b.Direction, direction) && b.Priority == priority:
			return fmt.Sprintf("priority %d %s is winkube's rule %s; Azure refuses two rules of one direction and priority (SecurityRuleConflict): choose a priority winkube does not use (%s)",
				priority, direction, b.Name, used(builtin, direction))
		}
	}
	return ""
}

func used(builtin []securitygroups.Rule, direction string) string {
	var out []string
	for _, b := range builtin {
		if strings.EqualFold(b.Direction, direction) {
			out = append(out, strconv.Itoa(int(b.Priority)))
		}
	}
	return strings.Join(out, ", ")
}
