package cloudprovider

import "context"

// Network is the part of Azure the service controller programs: load
// balancers and public IPs, in Azure's terms but without the SDK, so that
// the controller's logic stays apart from how ARM is called.
type Network interface {
	// LoadBalancer returns the load balancer, or nil when it does not
	// exist.
	LoadBalancer(ctx context.Context, ref Ref) (*LoadBalancer, error)
	// PutLoadBalancer creates the load balancer or replaces its frontends,
	// pools, probes and rules with lb's, keeping what lb does not describe
	// (inbound NAT rules, outbound rules, tags); it returns once Azure has
	// finished.
	PutLoadBalancer(ctx context.Context, lb *LoadBalancer) error
	// DeleteLoadBalancer deletes it; one already gone is no error.
	DeleteLoadBalancer(ctx context.Context, ref Ref) error
	// EnsurePublicIP creates a static Standard public IP unless it exists,
	// and returns its ID and address.
	EnsurePublicIP(ctx context.Context, ref Ref, location string, tags map[string]string) (id, address string, err error)
	// DeletePublicIP deletes it; one already gone is no error.
	DeletePublicIP(ctx context.Context, ref Ref) error
	// SecurityGroup returns the NSG, or nil when it does not exist.
	SecurityGroup(ctx context.Context, ref Ref) (*SecurityGroup, error)
	// PutSecurityGroup replaces the NSG's rules with sg's, keeping what sg
	// does not describe (its tags, and properties of rules it does not
	// set); it returns once Azure has finished.
	PutSecurityGroup(ctx context.Context, sg *SecurityGroup) error
}

// Ref names an ARM resource.
type Ref struct {
	SubscriptionID, ResourceGroup, Name string
}

// ID is the ARM ID of a resource of the given provider type
// (Microsoft.Network/loadBalancers) named by ref.
func (r Ref) ID(typ string) string {
	return "/subscriptions/" + r.SubscriptionID + "/resourceGroups/" + r.ResourceGroup + "/providers/" + typ + "/" + r.Name
}

// LoadBalancer is a load balancer's frontends, backend pools, probes and
// rules, as ARM's REST API shapes them; parts refer to each other by name.
type LoadBalancer struct {
	Ref
	Location  string
	Frontends []Frontend
	Pools     []Pool
	Probes    []Probe
	Rules     []Rule
}

// Frontend is a frontend IP configuration: a public IP, or a private
// address in a subnet.
type Frontend struct {
	Name       string
	PublicIPID string
	SubnetID   string
	// PrivateIP is the address Azure assigned (or the one asked for).
	PrivateIP string
}

// Pool is a backend address pool. IP-based pools list their addresses in
// one virtual network; NIC-based ones list none here (the NICs name the
// pool).
type Pool struct {
	Name      string
	VNetID    string
	Addresses []PoolAddress
}

// PoolAddress is one backend of an IP-based pool.
type PoolAddress struct {
	Name, IP string
}

// Probe is a health probe: Protocol is Tcp, Http or Https; Path only for
// Http(s).
type Probe struct {
	Name, Protocol, Path      string
	Port, Interval, Threshold int32
}

// Rule is a load-balancing rule. Protocol is Tcp, Udp or All;
// LoadDistribution Default, SourceIP or SourceIPProtocol.
type Rule struct {
	Name                      string
	Frontend, Pool, Probe     string
	Protocol                  string
	FrontendPort, BackendPort int32
	FloatingIP, TCPReset      bool
	DisableOutboundSNAT       bool
	LoadDistribution          string
	IdleTimeoutMinutes        int32
}

// SecurityGroup is a network security group's rules, as ARM's REST API
// shapes them (only the properties the cloud provider reads or writes).
type SecurityGroup struct {
	Ref
	Rules []SecurityRule
}

// SecurityRule is one rule of an NSG. Single values go in the singular
// properties, several in the plural ones, as cloud-provider-azure writes
// them. DestinationASGs marks a rule whose destinations are application
// security groups (kept even without destination prefixes).
type SecurityRule struct {
	Name                        string
	Priority                    int32
	Protocol, Access, Direction string
	SourcePrefix                string
	SourcePrefixes              []string
	SourcePortRange             string
	DestinationPrefix           string
	DestinationPrefixes         []string
	DestinationPortRange        string
	DestinationPortRanges       []string
	DestinationASGs             bool
}
