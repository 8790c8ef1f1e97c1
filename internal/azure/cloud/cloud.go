// Package cloud builds, once per identity and subscription, the Azure
// services the controllers use.
package cloud

import (
	"errors"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/winkube/winkube/internal/azure/availabilitysets"
	"github.com/winkube/winkube/internal/azure/disks"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/identities"
	"github.com/winkube/winkube/internal/azure/inboundnatrules"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/machinelogs"
	"github.com/winkube/winkube/internal/azure/natgateways"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azure/resourcegroups"
	"github.com/winkube/winkube/internal/azure/resourceskus"
	"github.com/winkube/winkube/internal/azure/roleassignments"
	"github.com/winkube/winkube/internal/azure/routetables"
	"github.com/winkube/winkube/internal/azure/scalesets"
	"github.com/winkube/winkube/internal/azure/securitygroups"
	"github.com/winkube/winkube/internal/azure/subnets"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/azure/vmimages"
	"github.com/winkube/winkube/internal/azure/vnets"
	"github.com/winkube/winkube/internal/images"
)

// Services are one subscription's Azure services.
type Services struct {
	Subscription string
	Groups       *resourcegroups.Service
	NSGs         *securitygroups.Service
	RouteTables  *routetables.Service
	NatGateways  *natgateways.Service
	PublicIPs    *publicips.Service
	VNets        *vnets.Service
	Subnets      *subnets.Service
	LBs          *loadbalancers.Service
	NatRules     *inboundnatrules.Service
	NICs         *networkinterfaces.Service
	VMs          *virtualmachines.Service
	AvSets       *availabilitysets.Service
	ScaleSets    *scalesets.Service
	Disks        *disks.Service
	SKUs         *resourceskus.Service
	Roles        *roleassignments.Service
	Identities   *identities.Service
	// Tags changes a resource's tags and nothing else.
	Tags *tags.Service
	// BootLogs reads a machine's bootstrap log through Azure.
	BootLogs *machinelogs.Service
	Images   *images.Resolver
	// ImageFacts reads what the resolver does not need: an image's
	// Hyper-V generation.
	ImageFacts *vmimages.Lister

	// ResourceManager is the ARM endpoint the services call: the only host
	// a resume token may make them poll (async.TokenOnEndpoint).
	ResourceManager string
}

// Cloud hands out Services by identity and subscription.
type Cloud struct {
	// Endpoint is the default cloud and the process's own credential
	// (Credential nil: the process has none, every cluster needs an
	// identity).
	Endpoint endpoint.Config
	// CallTimeout bounds each request the services make
	// (DefaultCallTimeout when zero).
	CallTimeout time.Duration

	mu     sync.Mutex
	shared *endpoint.Config
	subs   map[string]versioned
}

type versioned struct {
	version string
	s       *Services
}

// DefaultCallTimeout bounds one request to Azure: ARM answers within
// seconds, long-running work included (it returns an operation to poll,
// and a reconcile polls it once). A request that hangs holds a controller
// worker, and every object of its kind waits for a free one; abandoned,
// the next reconcile asks again. CAPZ bounds a whole service reconcile to
// 12 s (util/reconciler/defaults.go DefaultAzureServiceReconcileTimeout,
// cluster-api-provider-azure @69ec3a40); one call gets as long here.
const DefaultCallTimeout = 12 * time.Second

// Identity is who services act as.
type Identity struct {
	// Key names the identity; Version changes whenever its credential (or
	// its cloud) was rebuilt, which replaces the services made with the
	// old one.
	Key, Version string
	Credential   azcore.TokenCredential
	// Cloud overrides the endpoint's cloud (a cluster's azureEnvironment).
	Cloud *endpoint.Config
}

// New returns a Cloud for an endpoint.
func New(cfg endpoint.Config) *Cloud {
	return &Cloud{Endpoint: cfg, subs: map[string]versioned{}}
}

// Shared is the endpoint with its transport built once: every client, and
// every identity's credential, shares one connection pool.
func (c *Cloud) Shared() (endpoint.Config, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sharedLocked()
}

func (c *Cloud) sharedLocked() (endpoint.Config, error) {
	if c.shared != nil {
		return *c.shared, nil
	}
	cfg, err := c.Endpoint.Shared()
	if err != nil {
		return cfg, err
	}
	c.shared = &cfg
	return cfg, nil
}

// ErrNoCredential is returned for a cluster without an identity when the
// process has no credential of its own.
var ErrNoCredential = errors.New("the manager has no Azure credential of its own: give the AzureCluster an identityRef to an AzureClusterIdentity")

// For returns the services of a subscription acting as the process's own
// credential.
func (c *Cloud) For(subscription string) (*Services, error) {
	return c.ForIdentity(nil, subscription)
}

// ForIdentity returns the services of a subscription acting as an
// identity; nil is the process's own credential.
func (c *Cloud) ForIdentity(id *Identity, subscription string) (*Services, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, version := "|"+subscription, ""
	if id != nil {
		key, version = id.Key+"|"+subscription, id.Version
	}
	if v, ok := c.subs[key]; ok && v.version == version {
		return v.s, nil
	}
	cfg, err := c.sharedLocked()
	if err != nil {
		return nil, err
	}
	if id != nil {
		if id.Cloud != nil {
			cfg = *id.Cloud
		}
		cfg.Credential = id.Credential
	}
	if cfg.Credential == nil {
		return nil, ErrNoCredential
	}
	// One try per call, whatever the endpoint's own retry settings: the
	// SDK would sleep through a 429's Retry-After (up to a minute, three
	// times) inside a reconcile. A refusal returns to the controller,
	// which requeues the object for when Azure said to come back; CAPZ's
	// clients make one try too (azure/defaults.go ARMClientOptions @69ec3a40).
	timeout := c.CallTimeout
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	cfg.Retry = &policy.RetryOptions{MaxRetries: -1, TryTimeout: timeout}
	s := &Services{Subscription: subscription, ResourceManager: cfg.ResourceManager()}
	set := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	set(func() (e error) { s.Groups, e = resourcegroups.New(subscription, cfg); return })
	set(func() (e error) { s.NSGs, e = securitygroups.New(subscription, cfg); return })
	set(func() (e error) { s.RouteTables, e = routetables.New(subscription, cfg); return })
	set(func() (e error) { s.NatGateways, e = natgateways.New(subscription, cfg); return })
	set(func() (e error) { s.PublicIPs, e = publicips.New(subscription, cfg); return })
	set(func() (e error) { s.VNets, e = vnets.New(subscription, cfg); return })
	set(func() (e error) { s.Subnets, e = subnets.New(subscription, cfg); return })
	set(func() (e error) { s.LBs, e = loadbalancers.New(subscription, cfg); return })
	set(func() (e error) { s.NatRules, e = inboundnatrules.New(subscription, cfg); return })
	set(func() (e error) { s.NICs, e = networkinterfaces.New(subscription, cfg); return })
	set(func() (e error) { s.VMs, e = virtualmachines.New(subscription, cfg); return })
	set(func() (e error) { s.Disks, e = disks.New(subscription, cfg); return })
	set(func() (e error) { s.ScaleSets, e = scalesets.New(subscription, cfg); return })
	set(func() (e error) { s.SKUs, e = resourceskus.New(subscription, cfg); return })
	set(func() (e error) { s.AvSets, e = availabilitysets.New(subscription, cfg); return })
	set(func() (e error) { s.Roles, e = roleassignments.New(subscription, cfg); return })
	set(func() (e error) { s.BootLogs, e = machinelogs.New(subscription, cfg); return })
	set(func() (e error) { s.Tags, e = tags.NewService(subscription, cfg); return })
	s.Identities = identities.New(cfg)
	set(func() error {
		l, e := vmimages.New(subscription, cfg)
		s.Images, s.ImageFacts = images.NewResolver(l, time.Hour), l
		return e
	})
	if err != nil {
		return nil, err
	}
	c.subs[key] = versioned{version: version, s: s}
	return s, nil
}
