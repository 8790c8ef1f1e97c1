// Package controllers reconciles winkube's infrastructure objects against
// Azure, per the Cluster API infrastructure provider contract. Reconcilers
// read objects, build plain specs, hand them to internal/azure services one
// step at a time (long-running operations are resumed from tokens kept in
// status) and write status; every step is idempotent, so a crash at any line
// is repaired by the next reconcile.
package controllers

import (
	"context"
	"errors"
	"fmt"
	events "k8s.io/client-go/tools/record"
	"sigs.k8s.io/cluster-api/util/predicates"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/natgateways"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azure/routetables"
	"github.com/winkube/winkube/internal/azure/securitygroups"
	"github.com/winkube/winkube/internal/azure/subnets"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/azure/vnets"
	"github.com/winkube/winkube/internal/nsgrules"
)

// APIServerPort is the port of the API server behind the load balancer.
const APIServerPort = nsgrules.APIServerPort

// +kubebuilder:rbac:groups=infrastructure.winkube.dev,resources=azureclusters;azureclusters/status;azureclusters/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;clusters/status,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// AzureClusterReconciler provisions a cluster's network and API-server
// load balancer.
type AzureClusterReconciler struct {
	Client client.Client
	Cloud  *cloud.Cloud
	// Identities resolves the cluster's identity to its services.
	Identities *Identities
	// Requeue is how soon to look again at an operation under way.
	Requeue time.Duration
	// MinThrottleWait is the shortest wait after a 429 (see
	// Options.MinThrottleWait).
	MinThrottleWait time.Duration
	// Recorder records the cluster's Events; the manager's when nil.
	Recorder events.EventRecorder
}

// SetupWithManager registers the controller.
func (r *AzureClusterReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Requeue == 0 {
		r.Requeue = 5 * time.Second
	}
	if r.Identities == nil {
		ids, err := newIdentities(mgr, r.Cloud, Options{})
		if err != nil {
			return err
		}
		r.Identities = ids
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("azurecluster-controller")
	}
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.AzureCluster{}, builder.WithPredicates(azureClusterChanged)).
		Watches(&infrav1.AzureClusterIdentity{}, clustersOfIdentity(mgr.GetClient())).
		// The Cluster's pause and unpause (clusterctl move ends with one):
		// without this watch an unpaused cluster waited for the resync.
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(util.ClusterToInfrastructureMapFunc(context.Background(), infrav1.GroupVersion.WithKind("AzureCluster"), mgr.GetClient(), &infrav1.AzureCluster{})),
			builder.WithPredicates(predicates.ClusterPausedTransitions(mgr.GetScheme(), mgr.GetLogger()))).
		WithOptions(opts).Named("azurecluster").Complete(r)
}

// Reconcile brings one AzureCluster's Azure resources to its spec.
func (r *AzureClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	defer requeueWhenThrottled(ctx, r.MinThrottleWait, &res, &reterr)
	ctx = async.WithWait(ctx)
	s, err := openScope[*clusterv1.Cluster](ctx, r.Client, req.NamespacedName, &infrav1.AzureCluster{})
	if s == nil {
		return ctrl.Result{}, err
	}
	defer s.close(ctx, &reterr)
	if stop, err := s.load(ctx, r.Client, clusterOwner); stop {
		return ctrl.Result{}, err
	}
	ac, cluster, deleting := s.obj, s.cluster, s.deleting
	clusterName := clusterNameOf(ac)
	if cluster != nil {
		clusterName = cluster.Name
	}
	svc, err := r.Identities.Services(ctx, ac)
	if ie := (*identityError)(nil); errors.As(err, &ie) {
		// Fixing the identity resumes the cluster (a watch); a namespace's
		// labels are looked at again after a while.
		msg := ie.msg
		if deleting {
			msg = deletionNeedsIdentity(ac, "the cluster's Azure resources", ie)
		}
		setReady(ac, metav1.ConditionFalse, ie.reason, msg)
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	if err != nil {
		return ctrl.Result{}, readBlocked(ac, deleting, "Azure credentials", err)
	}
	owner, err := ownerOf(ctx, r.Client, clusterName, ac.Namespace)
	if err != nil {
		return ctrl.Result{}, readBlocked(ac, deleting, "the AzureClusters", err)
	}
	ctx = tags.WithAdoptUnscoped(ctx, owner.AdoptUnscoped)
	owner.UID = clusterUID(ac)
	if dropped := dropForeignTokens(ac, svc); len(dropped) > 0 {
		r.Recorder.Eventf(ac, corev1.EventTypeWarning, ForeignOperationReason,
			"dropped the recorded operations %v: they would poll another host than the ARM endpoint %s; winkube starts them again", dropped, svc.ResourceManager)
	}
	if !ac.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, ac, svc, clusterName, owner)
	}
	return r.reconcileNormal(ctx, ac, svc, clusterName, owner)
}

// clusterNameOf is the name of the Cluster an AzureCluster belongs to, from
// its owner reference or label, without reading the Cluster: ownership tags
// carry it, so it must be right even when the Cluster is gone.
func clusterNameOf(ac *infrav1.AzureCluster) string {
	for _, ref := range ac.OwnerReferences {
		if ref.Kind == "Cluster" && strings.HasPrefix(ref.APIVersion, clusterv1.GroupVersion.Group+"/") {
			return ref.Name
		}
	}
	if name := ac.Labels[clusterv1.ClusterNameLabel]; name != "" {
		return name
	}
	return ac.Name
}

// clusterNames are the names of what winkube creates for a cluster.
type clusterNames struct {
	rg, vnetRG, vnet                string
	cpSubnet, nodeSubnet            infrav1.SubnetSpec
	routeTable, natGateway, natGWIP string
	apiIP, lb                       string
}

func namesOf(ac *infrav1.AzureCluster, clusterName string) (clusterNames, error) {
	n := clusterNames{
		rg: ac.Spec.ResourceGroup, vnet: ac.Spec.NetworkSpec.Vnet.Name, vnetRG: ac.Spec.NetworkSpec.Vnet.ResourceGroup,
		routeTable: clusterName + "-node-routetable", natGateway: clusterName + "-node-natgw", natGWIP: clusterName + "-node-natgw-ip",
		apiIP: clusterName + "-apiserver-ip", lb: ac.Spec.NetworkSpec.APIServerLB.Name,
	}
	if n.vnetRG == "" {
		n.vnetRG = n.rg
	}
	var foundCP, foundNode bool
	for _, s := range ac.Spec.NetworkSpec.Subnets {
		switch s.Role {
		case infrav1.SubnetControlPlane:
			n.cpSubnet, foundCP = s, true
		case infrav1.SubnetNode:
			if !foundNode {
				n.nodeSubnet, foundNode = s, true
			}
		}
	}
	if !foundCP || !foundNode || n.rg == "" || n.vnet == "" || n.lb == "" {
		return n, fmt.Errorf("the AzureCluster lacks a resource group, VNet, load balancer or control-plane/node subnet: were winkube's webhooks installed when it was created?")
	}
	return n, nil
}

// clusterScope is what the phases of an AzureCluster's reconcile share.
type clusterScope struct {
	ac          *infrav1.AzureCluster
	svc         *cloud.Services
	clusterName string
	owner       tags.Owner
	n           clusterNames
}

func (r *AzureClusterReconciler) reconcileNormal(ctx context.Context, ac *infrav1.AzureCluster, svc *cloud.Services, clusterName string, owner tags.Owner) (ctrl.Result, error) {
	return runPhases(ctx, &clusterScope{ac: ac, svc: svc, clusterName: clusterName, owner: owner},
		r.holdFinalizerAndIdentity, r.validate, r.reconcileNetwork, r.reconcileEndpoint)
}

// holdFinalizerAndIdentity saves the finalizer before anything is created,
// and keeps the cluster's identity while the cluster has resources.
func (r *AzureClusterReconciler) holdFinalizerAndIdentity(ctx context.Context, cs *clusterScope) (*ctrl.Result, error) {
	if controllerutil.AddFinalizer(cs.ac, infrav1.ClusterFinalizer) {
		return &ctrl.Result{RequeueAfter: persisted}, nil // the finalizer is saved before anything is created
	}
	if err := holdIdentity(ctx, r.Client, cs.ac); err != nil {
		return &ctrl.Result{}, err
	}
	return nil, nil
}

// validate refuses a spec winkube cannot build (the webhooks refuse it
// first when they are installed).
func (r *AzureClusterReconciler) validate(_ context.Context, cs *clusterScope) (*ctrl.Result, error) {
	ac := cs.ac
	n, err := namesOf(ac, cs.clusterName)
	if err != nil {
		setReady(ac, metav1.ConditionFalse, InvalidConfigurationReason, err.Error())
		return &ctrl.Result{}, nil
	}
	if ac.Spec.NetworkSpec.APIServerLB.Type == "Internal" {
		setReady(ac, metav1.ConditionFalse, InvalidConfigurationReason, "internal API-server load balancers are not implemented yet: use type Public")
		return &ctrl.Result{}, nil
	}
	cs.n = n
	return nil, nil
}

// reconcileNetwork makes the resource group, the security groups, route
// table, NAT gateway, VNet and subnets, and the API server's IP and load
// balancer, one step at a time (runActions), then their tags.
func (r *AzureClusterReconciler) reconcileNetwork(ctx context.Context, cs *clusterScope) (*ctrl.Result, error) {
	ac, svc, clusterName, owner, n := cs.ac, cs.svc, cs.clusterName, cs.owner, cs.n
	loc, sub := ac.Spec.Location, ac.Spec.SubscriptionID
	owned := func(role string) map[string]*string { return tags.Build(owner, role, ac.Spec.AdditionalTags) }
	id := func(rg, typ, name string) string { return armID(sub, rg, "Microsoft.Network", typ, name) }

	if err := svc.Groups.Reconcile(ctx, resourcegroupsSpec(n.rg, loc, owned("resourcegroup"))); err != nil {
		return stop(r.azureError(ac, "resource group", err))
	}
	if res, err := r.scopeGroup(ctx, ac, svc, n.rg, owner); res != nil || err != nil {
		return res, err
	}
	cpCIDRs := n.cpSubnet.CIDRBlocks
	cpSource := "VirtualNetwork"
	if len(cpCIDRs) > 0 {
		cpSource = cpCIDRs[0]
	}
	subnetSpecs := clusterSubnets(ac, n, id)
	userVNet := false
	actions := []action{
		{step{"securitygroups", n.cpSubnet.SecurityGroup.Name}, func(tok string) (string, bool, error) {
			return svc.NSGs.Reconcile(ctx, securitygroups.Spec{ResourceGroup: n.rg, Name: n.cpSubnet.SecurityGroup.Name, Location: loc, Tags: owned("controlplane-nsg"),
				Rules: append(nsgrules.ControlPlane(), userRules(n.cpSubnet)...)}, tok)
		}},
		{step{"securitygroups", n.nodeSubnet.SecurityGroup.Name}, func(tok string) (string, bool, error) {
			return svc.NSGs.Reconcile(ctx, securitygroups.Spec{ResourceGroup: n.rg, Name: n.nodeSubnet.SecurityGroup.Name, Location: loc, Tags: owned("node-nsg"),
				Rules: append(nsgrules.Node(cpSource), userRules(n.nodeSubnet)...)}, tok)
		}},
		{step{"routetables", n.routeTable}, func(tok string) (string, bool, error) {
			return svc.RouteTables.Reconcile(ctx, routetables.Spec{ResourceGroup: n.rg, Name: n.routeTable, Location: loc, Tags: owned("node-routetable")}, tok)
		}},
		{step{"publicips", n.natGWIP}, func(tok string) (string, bool, error) {
			return svc.PublicIPs.Reconcile(ctx, publicips.Spec{ResourceGroup: n.rg, Name: n.natGWIP, Location: loc, Tags: owned("node-natgw-ip")}, tok)
		}},
		{step{"natgateways", n.natGateway}, func(tok string) (string, bool, error) {
			return svc.NatGateways.Reconcile(ctx, natgateways.Spec{ResourceGroup: n.rg, Name: n.natGateway, Location: loc, PublicIPID: id(n.rg, "publicIPAddresses", n.natGWIP), Tags: owned("node-natgw")}, tok)
		}},
		{step{"vnets", n.vnet}, func(tok string) (string, bool, error) {
			return r.reconcileVNet(ctx, svc, ac, n, owner, subnetSpecs, &userVNet, tok)
		}},
	}
	// In a VNet the user brought, each of the cluster's subnets is a step
	// of its own (after the VNet step has found out whose VNet it is).
	for _, sn := range subnetSpecs {
		actions = append(actions, action{step{"subnets", sn.Name}, func(tok string) (string, bool, error) {
			if !userVNet {
				return "", true, nil
			}
			return r.reconcileUserSubnet(ctx, svc, ac, n, owner, sn, tok)
		}})
	}
	actions = append(actions, []action{
		{step{"publicips", n.apiIP}, func(tok string) (string, bool, error) {
			return svc.PublicIPs.Reconcile(ctx, publicips.Spec{ResourceGroup: n.rg, Name: n.apiIP, Location: loc, DNSLabel: apiServerDNSLabel(sub, n.rg, clusterName), Tags: owned("apiserver-ip")}, tok)
		}},
		{step{"loadbalancers", n.lb}, func(tok string) (string, bool, error) {
			return svc.LBs.Reconcile(ctx, loadbalancers.Spec{ResourceGroup: n.rg, Name: n.lb, Location: loc, SubscriptionID: sub, PublicIPID: id(n.rg, "publicIPAddresses", n.apiIP), Port: APIServerPort, Tags: owned("apiserver-lb")}, tok)
		}},
	}...)
	pending, failed, err := runActions(&ac.Status.LongRunningOperationStates, n.rg, "PUT", actions)
	if notOwned(err) {
		// Someone else's resource of that name: refused, never changed.
		// Nothing tells when the user renames or removes it, so look again
		// now and then.
		setReady(ac, metav1.ConditionFalse, ResourceNotOwnedReason, err.Error())
		return &ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	if err != nil {
		return stop(r.azureError(ac, failed.service+" "+failed.name, err))
	}
	if pending != nil {
		setReady(ac, metav1.ConditionFalse, ProvisioningReason, fmt.Sprintf("creating %s %s", pending.service, pending.name))
		return &ctrl.Result{RequeueAfter: operationRequeue(ctx, r.Requeue)}, nil
	}
	if err := reconcileClusterTags(ctx, svc, ac, n, owner); err != nil {
		return stop(r.azureError(ac, "tags", err))
	}
	return nil, nil
}

// reconcileEndpoint sets the control-plane endpoint from the API server's
// IP, publishes it, and reports the location's zones as failure domains.
func (r *AzureClusterReconciler) reconcileEndpoint(ctx context.Context, cs *clusterScope) (*ctrl.Result, error) {
	ac, svc, clusterName, n := cs.ac, cs.svc, cs.clusterName, cs.n
	loc := ac.Spec.Location

	ip, err := svc.PublicIPs.Get(ctx, n.rg, n.apiIP)
	if err == nil && (ip == nil || ip.Properties.IPAddress == nil) {
		err = fmt.Errorf("public IP %s has no address", n.apiIP)
	}
	if err != nil {
		return stop(r.azureError(ac, "API server IP", fmt.Errorf("reading the API server's public IP: %w", err)))
	}
	if ac.Spec.ControlPlaneEndpoint.Host == "" {
		ac.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: *ip.Properties.IPAddress, Port: APIServerPort}
	}
	if err := r.publishServicesEndpoint(ctx, ac, clusterName); err != nil {
		return &ctrl.Result{}, err
	}
	zones, err := svc.SKUs.Zones(ctx, loc)
	if err != nil {
		return stop(r.azureError(ac, "zones", err))
	}
	ac.Status.FailureDomains = nil
	for _, z := range zones {
		ac.Status.FailureDomains = append(ac.Status.FailureDomains, clusterv1.FailureDomain{Name: z, ControlPlane: ptr.To(true)})
	}
	if !ptr.Deref(ac.Status.Initialization.Provisioned, false) {
		r.Recorder.Eventf(ac, corev1.EventTypeNormal, ProvisionedReason, "the cluster's network and API server load balancer are provisioned in %s", n.rg)
	}
	ac.Status.Initialization.Provisioned = ptr.To(true)
	setReady(ac, metav1.ConditionTrue, ProvisionedReason, "")
	return nil, nil
}

// userRules are the subnet's rules as the user wrote them: every field is
// sent, and what is left out is Azure's "*" (any), never narrower or wider.
func userRules(s infrav1.SubnetSpec) []securitygroups.Rule {
	var out []securitygroups.Rule
	for _, r := range s.SecurityGroup.SecurityRules {
		access := r.Action
		if access == "" {
			access = "Allow"
		}
		out = append(out, securitygroups.Rule{Name: r.Name, Protocol: r.Protocol, Direction: r.Direction, Priority: r.Priority,
			Source: r.Source, SourcePorts: r.SourcePorts, Destination: r.Destination, DestinationPorts: r.DestinationPorts,
			Access: access, Description: r.Description})
	}
	return out
}

// clusterSubnets are the subnets of the spec with what winkube attaches to them.
func clusterSubnets(ac *infrav1.AzureCluster, n clusterNames, id func(rg, typ, name string) string) []vnets.Subnet {
	var out []vnets.Subnet
	for _, s := range ac.Spec.NetworkSpec.Subnets {
		sn := vnets.Subnet{Name: s.Name, CIDRs: s.CIDRBlocks, NSGID: id(n.rg, "networkSecurityGroups", s.SecurityGroup.Name)}
		// Every subnet takes the route table the cloud provider writes the
		// nodes' pod routes into: the API server on a control-plane VM
		// reaches webhooks, aggregated APIs and metrics in pods on workers
		// only through them when pod addresses are routed (host-gw); VNet
		// system routes know no pod CIDR. (CAPZ @0f5027f6 gives the
		// control-plane subnet no route table, azurecluster_default.go
		// setControlPlaneSubnetDefaults: its flavors encapsulate.)
		sn.RouteTableID = id(n.rg, "routeTables", n.routeTable)
		if s.Role == infrav1.SubnetNode {
			sn.NatGatewayID = id(n.rg, "natGateways", n.natGateway)
		}
		out = append(out, sn)
	}
	return out
}

// reconcileVNet creates the VNet with its subnets when it is missing or the
// cluster's. A VNet the user brought (existing, tagged as no winkube
// cluster's) is never written: *userVNet is set, and the subnet steps that
// follow add the cluster's subnets one by one. Another cluster's VNet is
// refused.
func (r *AzureClusterReconciler) reconcileVNet(ctx context.Context, svc *cloud.Services, ac *infrav1.AzureCluster, n clusterNames, owner tags.Owner, subnets []vnets.Subnet, userVNet *bool, tok string) (string, bool, error) {
	want := tags.Build(owner, "vnet", ac.Spec.AdditionalTags)
	if tok == "" {
		cur, err := svc.VNets.Get(ctx, n.vnetRG, n.vnet)
		if err != nil {
			return "", false, err
		}
		if cur != nil && tags.IsOwned(cur.Tags, owner.Cluster) && !owner.Owns(cur.Tags) {
			// A cluster of this name in another namespace made it.
			return "", false, tags.CheckOwned("VNet", n.vnet, want, cur.Tags, owner.AdoptUnscoped)
		}
		if cur != nil {
			// Another cluster's VNet is not one the user brought: this
			// cluster's subnets, and its machines, would join that
			// cluster's network.
			if e := owner.RefuseForeign("VNet", n.vnet, cur.Tags); e != nil {
				return "", false, e
			}
		}
		if cur == nil && !strings.EqualFold(n.vnetRG, n.rg) {
			// A VNet in a group of its own is made only where no other
			// cluster owns the group (scopeGroup checks the cluster's own
			// group). Only then: an existing VNet says whose it is by its
			// own tags (above), and an identity given Network Contributor
			// on a VNet the user brought may not read its group.
			g, err := svc.Groups.Get(ctx, n.vnetRG)
			if err != nil {
				return "", false, err
			}
			if g != nil {
				if e := owner.RefuseForeign("resource group", n.vnetRG, g.Tags); e != nil {
					return "", false, e
				}
			}
		}
		if cur != nil && !owner.Owns(cur.Tags) {
			*userVNet = true
			return "", true, nil
		}
	}
	return svc.VNets.Reconcile(ctx, vnets.Spec{ResourceGroup: n.vnetRG, Name: n.vnet, Location: ac.Spec.Location, CIDRs: ac.Spec.NetworkSpec.Vnet.CIDRBlocks,
		Subnets: subnets, Tags: want}, tok)
}

// reconcileUserSubnet adds one of the cluster's subnets to a VNet the user
// brought. Subnets carry no tags, so what winkube made is what it recorded
// in status.createdResources, before making it: a subnet that exists and is
// not recorded is the user's, and is refused, never changed.
func (r *AzureClusterReconciler) reconcileUserSubnet(ctx context.Context, svc *cloud.Services, ac *infrav1.AzureCluster, n clusterNames, owner tags.Owner, sn vnets.Subnet, tok string) (string, bool, error) {
	id := armID(ac.Spec.SubscriptionID, n.vnetRG, "Microsoft.Network", "virtualNetworks", n.vnet, "subnets", sn.Name)
	if tok == "" && isClaimed(ac.Status.CreatedResources, id) {
		// A record may be forged: an existing subnet is written only while
		// it uses the cluster's own security group.
		if err := clusterProof(ac, n, owner).check(ctx, svc, id, ac.Status.CreatedResources); err != nil {
			var u *errUnprovable
			if !errors.As(err, &u) {
				return "", false, err
			}
			unclaim(&ac.Status.CreatedResources, id)
			return "", false, &subnets.ExistsError{VNet: n.vnet, Name: sn.Name}
		}
	}
	if !isClaimed(ac.Status.CreatedResources, id) {
		cur, err := svc.Subnets.Get(ctx, n.vnetRG, n.vnet, sn.Name)
		if err != nil {
			return "", false, err
		}
		if cur != nil {
			return "", false, &subnets.ExistsError{VNet: n.vnet, Name: sn.Name}
		}
		// Recorded first, created next time: the record is saved before
		// the subnet can exist.
		claim(&ac.Status.CreatedResources, id)
		return "", false, nil
	}
	return svc.Subnets.Reconcile(ctx, n.vnetRG, n.vnet, sn, true, tok)
}

func (r *AzureClusterReconciler) azureError(obj interface {
	client.Object
	SetConditions([]metav1.Condition)
	GetConditions() []metav1.Condition
}, what string, err error) (ctrl.Result, error) {
	reportAzureError(obj, what, err)
	return ctrl.Result{}, fmt.Errorf("%s: %w", what, err)
}

// networkTags reads the tags of one of a cluster's tagged resources; exists
// is false when it is missing.
func networkTags(ctx context.Context, svc *cloud.Services, kind, rg, name string) (t map[string]*string, exists bool, err error) {
	switch kind {
	case "securitygroups":
		v, e := svc.NSGs.Get(ctx, rg, name)
		if err = e; v != nil {
			t, exists = v.Tags, true
		}
	case "routetables":
		v, e := svc.RouteTables.Get(ctx, rg, name)
		if err = e; v != nil {
			t, exists = v.Tags, true
		}
	case "natgateways":
		v, e := svc.NatGateways.Get(ctx, rg, name)
		if err = e; v != nil {
			t, exists = v.Tags, true
		}
	case "publicips":
		v, e := svc.PublicIPs.Get(ctx, rg, name)
		if err = e; v != nil {
			t, exists = v.Tags, true
		}
	case "loadbalancers":
		v, e := svc.LBs.Get(ctx, rg, name)
		if err = e; v != nil {
			t, exists = v.Tags, true
		}
	case "vnets":
		v, e := svc.VNets.Get(ctx, rg, name)
		if err = e; v != nil {
			t, exists = v.Tags, true
		}
	default:
		err = fmt.Errorf("no tags reader for %s", kind)
	}
	return t, exists, err
}

func networkDelete(ctx context.Context, svc *cloud.Services, kind, rg, name, tok string) (string, bool, error) {
	switch kind {
	case "securitygroups":
		return svc.NSGs.Delete(ctx, rg, name, tok)
	case "routetables":
		return svc.RouteTables.Delete(ctx, rg, name, tok)
	case "natgateways":
		return svc.NatGateways.Delete(ctx, rg, name, tok)
	case "publicips":
		return svc.PublicIPs.Delete(ctx, rg, name, tok)
	case "loadbalancers":
		return svc.LBs.Delete(ctx, rg, name, tok)
	case "vnets":
		return svc.VNets.Delete(ctx, rg, name, tok)
	}
	return "", false, fmt.Errorf("no delete for %s", kind)
}

// ownedDelete deletes a resource only if it is tagged as the cluster's: one
// that is missing is done, one that is not the cluster's is left alone.
func ownedDelete(ctx context.Context, svc *cloud.Services, owner tags.Owner, kind, rg, name string) action {
	return action{step{kind, name}, func(tok string) (string, bool, error) {
		if tok == "" {
			t, exists, err := networkTags(ctx, svc, kind, rg, name)
			if err != nil || !exists {
				return "", err == nil, err
			}
			if !owner.Owns(t) {
				return "", true, nil
			}
		}
		return networkDelete(ctx, svc, kind, rg, name, tok)
	}}
}

func (r *AzureClusterReconciler) reconcileDelete(ctx context.Context, ac *infrav1.AzureCluster, svc *cloud.Services, clusterName string, owner tags.Owner) (ctrl.Result, error) {
	setReady(ac, metav1.ConditionFalse, DeletingReason, "deleting the cluster's Azure resources")
	n, err := namesOf(ac, clusterName)
	if err != nil {
		// reconcileNormal creates nothing from a spec this incomplete.
		if err := releaseIdentity(ctx, r.Client, ac); err != nil {
			return ctrl.Result{}, err
		}
		controllerutil.RemoveFinalizer(ac, infrav1.ClusterFinalizer)
		return ctrl.Result{}, nil
	}
	var actions []action
	// First the subnets winkube added to a VNet the user brought (they use
	// the cluster's NSGs, route table and NAT gateway, which Azure will not
	// delete while in use), exactly as recorded.
	p := clusterProof(ac, n, owner)
	for _, id := range sortForDeletion(ac.Status.CreatedResources) {
		actions = append(actions, action{stepOf(id), func(tok string) (string, bool, error) {
			return deleteProven(ctx, svc, p, &ac.Status.CreatedResources, id, tok, func(err error) {
				r.Recorder.Eventf(ac, corev1.EventTypeWarning, RecordDroppedReason, "%v", err)
			})
		}})
	}
	g, err := svc.Groups.Get(ctx, n.rg)
	if err != nil {
		return ctrl.Result{}, blocked(ac, "resource group "+n.rg+" (reading it)", err)
	}
	vnet := ownedDelete(ctx, svc, owner, "vnets", n.vnetRG, n.vnet)
	switch {
	case g != nil && owner.Owns(g.Tags):
		// The group is winkube's: deleting it deletes everything in it (as
		// CAPZ does with a managed group). A VNet of the cluster's in
		// another group goes first, since it uses the group's NSGs.
		if !strings.EqualFold(n.vnetRG, n.rg) {
			actions = append(actions, vnet)
		}
		actions = append(actions, action{step{"resourcegroups", n.rg}, func(tok string) (string, bool, error) { return svc.Groups.Delete(ctx, n.rg, tok) }})
	case g != nil:
		// The user's group: only what is tagged as the cluster's goes, in
		// an order Azure accepts (users before what they use).
		own := func(kind, name string) action { return ownedDelete(ctx, svc, owner, kind, n.rg, name) }
		actions = append(actions,
			own("loadbalancers", n.lb), own("publicips", n.apiIP), vnet,
			own("natgateways", n.natGateway), own("publicips", n.natGWIP), own("routetables", n.routeTable),
			own("securitygroups", n.cpSubnet.SecurityGroup.Name), own("securitygroups", n.nodeSubnet.SecurityGroup.Name),
		)
	default:
		// The group is gone, and with it all in it; a VNet of the
		// cluster's elsewhere may remain.
		if !strings.EqualFold(n.vnetRG, n.rg) {
			actions = append(actions, vnet)
		}
	}
	pending, failed, err := runActions(&ac.Status.LongRunningOperationStates, n.rg, "DELETE", actions)
	if err != nil {
		return ctrl.Result{}, blocked(ac, failed.service+" "+failed.name, err)
	}
	if pending != nil {
		setReady(ac, metav1.ConditionFalse, DeletingReason, fmt.Sprintf("deleting %s %s", pending.service, pending.name))
		return ctrl.Result{RequeueAfter: operationRequeue(ctx, r.Requeue)}, nil
	}
	r.Recorder.Eventf(ac, corev1.EventTypeNormal, "Deleted", "deleted the cluster's Azure resources")
	if err := releaseIdentity(ctx, r.Client, ac); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(ac, infrav1.ClusterFinalizer)
	return ctrl.Result{}, nil
}

// publishServicesEndpoint writes <cluster>-kubernetes-services-endpoint:
// a ConfigMap holding the workload cluster's kube-system/
// kubernetes-services-endpoint with the API server's load-balanced
// address, which the Windows CNI's ClusterResourceSet applies. A Windows
// host reaches the kubernetes Service's ClusterIP only once kube-proxy
// has programmed it, and kube-proxy waits for the CNI's network, so
// Calico for Windows must be told the API server's own address (the
// tigera operator's kubernetesServiceEndpoint; CAPZ fills it from the
// Cluster's controlPlaneEndpoint in its HelmChartProxy values). Owned by
// the AzureCluster, it moves and goes with it.
func (r *AzureClusterReconciler) publishServicesEndpoint(ctx context.Context, ac *infrav1.AzureCluster, clusterName string) error {
	ep := ac.Spec.ControlPlaneEndpoint
	inner := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: infrav1.ServicesEndpointConfigMap, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{"KUBERNETES_SERVICE_HOST": ep.Host, "KUBERNETES_SERVICE_PORT": strconv.Itoa(int(ep.Port))},
	}
	doc, err := yaml.Marshal(inner)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: clusterName + infrav1.ServicesEndpointSuffix, Namespace: ac.Namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Data: map[string]string{infrav1.ServicesEndpointConfigMap + ".yaml": string(doc)},
	}
	if err := controllerutil.SetOwnerReference(ac, cm, r.Client.Scheme()); err != nil {
		return err
	}
	// Applied, not read first: the manager caches no ConfigMaps.
	return r.Client.Patch(ctx, cm, client.Apply, client.FieldOwner("winkube"), client.ForceOwnership) //nolint:staticcheck // client.Apply with typed objects is what controller-runtime offers here
}

// clusterProof is what proves an AzureCluster's records: the only
// resources it records are the subnets it adds to a user's VNet, which use
// its security groups.
func clusterProof(ac *infrav1.AzureCluster, n clusterNames, owner tags.Owner) *proof {
	nsg := func(name string) string {
		return armID(ac.Spec.SubscriptionID, n.rg, "Microsoft.Network", "networkSecurityGroups", name)
	}
	return &proof{owner: owner, kinds: []string{"virtualnetworks/subnets"}, nsgs: []string{nsg(n.cpSubnet.SecurityGroup.Name), nsg(n.nodeSubnet.SecurityGroup.Name)}}
}

// scopeGroup tags the cluster's resource group, made before winkube wrote
// namespace tags, with the namespace (the migration of tags.Owner), and
// refuses a group that is another cluster's: a same-named one's of another
// namespace, or any other winkube cluster's. A group without winkube's tags
// is the user's. The group's other resources get the tag from their own
// next write.
func (r *AzureClusterReconciler) scopeGroup(ctx context.Context, ac *infrav1.AzureCluster, svc *cloud.Services, rg string, owner tags.Owner) (*ctrl.Result, error) {
	g, err := svc.Groups.Get(ctx, rg)
	if err != nil {
		res, err := r.azureError(ac, "resource group", err)
		return &res, err
	}
	if g == nil {
		return nil, nil // not made yet
	}
	if !tags.IsOwned(g.Tags, owner.Cluster) {
		// Another cluster's group is not one the user brought: used as
		// such, this cluster's resources would be built in it, and its
		// machines' identities granted a role on all of it (grantRole).
		// Even a cluster of the same namespace's: the group goes with
		// that cluster, and all in it.
		// Refused before anything is written; nothing tells when the
		// spec or the group changes, so look again now and then.
		if e := owner.RefuseForeign("resource group", rg, g.Tags); e != nil {
			setReady(ac, metav1.ConditionFalse, ResourceNotOwnedReason, e.Error())
			return &ctrl.Result{RequeueAfter: time.Minute}, nil
		}
		return nil, nil // the user's group
	}
	want := tags.Build(owner, "", nil)
	if err := tags.CheckOwned("resource group", rg, want, g.Tags, owner.AdoptUnscoped); err != nil {
		setReady(ac, metav1.ConditionFalse, ResourceNotOwnedReason, err.Error())
		return &ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	if g.Tags[tags.NamespaceKey(owner.Cluster)] == nil || g.Tags[tags.UIDKey(owner.Cluster)] == nil {
		if err := svc.Groups.AddTags(ctx, rg, want); err != nil {
			res, err := r.azureError(ac, "resource group (adding the namespace and identity tags)", err)
			return &res, err
		}
	}
	return nil, nil
}
