package controllers

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// apiServerDNSLabel is the API server's public IP's DNS label. Azure's
// labels are unique per region across all of Azure (DnsRecordInUse), so
// the bare cluster name is usually someone else's; CAPZ names the IP and
// its label <cluster>-<hash> (azure/defaults.go GeneratePublicIPName and
// GenerateFQDN). The hash here is of the subscription, group and cluster,
// so that every reconcile asks for the same label. Labels are at most 63
// characters, so a long cluster name is cut.
func apiServerDNSLabel(subscription, resourceGroup, cluster string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.ToLower(subscription + "/" + resourceGroup + "/" + cluster)))
	name := strings.ToLower(cluster)
	if len(name) > 54 {
		name = strings.TrimRight(name[:54], "-")
	}
	return fmt.Sprintf("%s-%08x", name, h.Sum32())
}
