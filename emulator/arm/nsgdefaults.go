package arm

// nsgDefaultRules are the six rules every NSG has below its own, as GET
// shows them (azure-rest-api-specs Microsoft.Network stable/2024-05-01
// examples/NetworkSecurityGroupGet.json @ac19a045: names, priorities,
// prefixes and descriptions; the example's rules carry no type or etag).
func nsgDefaultRules(nsg *resource) []any {
	rule := func(name, desc, direction, access string, priority float64, src, dst string) any {
		return map[string]any{
			"name": name,
			"id":   nsg.idStr + "/defaultSecurityRules/" + name,
			"properties": map[string]any{
				"provisioningState": "Succeeded", "description": desc,
				"protocol": "*", "sourcePortRange": "*", "destinationPortRange": "*",
				"sourceAddressPrefix": src, "destinationAddressPrefix": dst,
				"access": access, "priority": priority, "direction": direction,
			},
		}
	}
	return []any{
		rule("AllowVnetInBound", "Allow inbound traffic from all VMs in VNET", "Inbound", "Allow", 65000, "VirtualNetwork", "VirtualNetwork"),
		rule("AllowAzureLoadBalancerInBound", "Allow inbound traffic from azure load balancer", "Inbound", "Allow", 65001, "AzureLoadBalancer", "*"),
		rule("DenyAllInBound", "Deny all inbound traffic", "Inbound", "Deny", 65500, "*", "*"),
		rule("AllowVnetOutBound", "Allow outbound traffic from all VMs to all VMs in VNET", "Outbound", "Allow", 65000, "VirtualNetwork", "VirtualNetwork"),
		rule("AllowInternetOutBound", "Allow outbound traffic from all VMs to Internet", "Outbound", "Allow", 65001, "*", "Internet"),
		rule("DenyAllOutBound", "Deny all outbound traffic", "Outbound", "Deny", 65500, "*", "*"),
	}
}
