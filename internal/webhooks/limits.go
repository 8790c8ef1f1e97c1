package webhooks

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/tags"
)

// Name lengths of the network resources a cluster makes, from Azure's
// naming rules (azure-resource-manager/management/resource-name-rules.md,
// Microsoft.Network): a VNet 2-64 characters, subnets, NSGs, route tables,
// NAT gateways, public IPs and load balancers 1-80.
const (
	maxVNetName     = 64
	maxNetworkName  = 80
	maxScaleSetName = 64
)

// validateClusterNames refuses a cluster whose resources would get names
// Azure refuses; the names winkube derives from the cluster's name
// (<cluster>-controlplane-subnet-nsg, <cluster>-node-routetable, ...) are
// checked as well as those the user set.
func validateClusterNames(cluster string, s *infrav1.AzureClusterSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(path *field.Path, name string, max int) {
		if len(name) <= max {
			return
		}
		msg := fmt.Sprintf("is %d characters; Azure takes at most %d: set a shorter name", len(name), max)
		if strings.HasPrefix(name, cluster+"-") {
			// Most likely the default, made from the cluster's name.
			msg += fmt.Sprintf(", or give the cluster a name of at most %d characters", max-(len(name)-len(cluster)))
		}
		errs = append(errs, field.Invalid(path, name, msg))
	}
	np := p.Child("networkSpec")
	check(np.Child("vnet", "name"), s.NetworkSpec.Vnet.Name, maxVNetName)
	check(np.Child("apiServerLB", "name"), s.NetworkSpec.APIServerLB.Name, maxNetworkName)
	for i, sn := range s.NetworkSpec.Subnets {
		sp := np.Child("subnets").Index(i)
		check(sp.Child("name"), sn.Name, maxNetworkName)
		check(sp.Child("securityGroup", "name"), sn.SecurityGroup.Name, maxNetworkName)
	}
	// Derived names the spec does not show: the cluster name is what to
	// shorten.
	for _, suffix := range []string{"-node-routetable", "-node-natgw-ip", "-apiserver-ip"} {
		if name := cluster + suffix; len(name) > maxNetworkName {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cluster,
				fmt.Sprintf("makes the Azure resource name %s, %d characters; Azure allows %d: use a cluster name of at most %d characters", name, len(name), maxNetworkName, maxNetworkName-len(suffix))))
			break
		}
	}
	return errs
}

// validateTags refuses additional tags Azure would refuse on every
// resource they go to: more than the limit beside winkube's own two (the
// cluster's ownership and the role), a name longer than 512 characters or
// with a character Azure reserves, a value longer than 256.
func validateTags(t map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if max := tags.MaxTags - tags.OwnTags; len(t) > max {
		errs = append(errs, field.TooMany(p, len(t), max))
	}
	for k, v := range t {
		kp := p.Key(k)
		switch {
		case len(k) > tags.MaxNameLength:
			errs = append(errs, field.Invalid(kp, k, fmt.Sprintf("a tag name has at most %d characters", tags.MaxNameLength)))
		case strings.ContainsAny(k, tags.ReservedChars):
			errs = append(errs, field.Invalid(kp, k, "Azure refuses tag names with any of < > % & \\ ? /"))
		case strings.HasPrefix(strings.ToLower(k), "winkube.dev_"):
			errs = append(errs, field.Invalid(kp, k, "winkube.dev_ tags are winkube's own (ownership and role)"))
		}
		if len(v) > tags.MaxValueLength {
			errs = append(errs, field.TooLong(kp, v, tags.MaxValueLength))
		}
	}
	return errs
}
