// Package controllers reconciles winkube's infrastructure objects against
// Azure, per the Cluster API infrastructure provider contract. Reconcilers
// read objects, build plain specs, hand them to internal/azure services one
// step at a time (long-running operations are resumed from tokens kept in
// status) and write status; every step is idempotent, so a crash at any line
// is repaired by the next reconcile.
package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/natgateways"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azure/routetables"
	"github.com/winkube/winkube/internal/azure/securitygroups"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/azure/vnets"
)

// APIServerPort is the port of the API server behind the load balancer.
const APIServerPort = 6443

// +kubebuilder:rbac:groups=infrastructure.winkube.dev,resources=azureclusters;azureclusters/status;azureclusters/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;clusters/status,verbs=get;list;watch

// AzureClusterReconciler provisions a cluster's network and API-server
// load balancer.
type AzureClusterReconciler struct {
	Client client.Client
	Cloud  *cloud.Cloud
	// Requeue is how soon to look again at an operation under way.
	Requeue time.Duration
}

// SetupWithManager registers the controller.
func (r *AzureClusterReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Requeue == 0 {
		r.Requeue = 5 * time.Second
	}
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.AzureCluster{}).WithOptions(opts).Named("azurecluster").Complete(r)
}

// Reconcile brings one AzureCluster's Azure resources to its spec.
func (r *AzureClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	ac := &infrav1.AzureCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, ac); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, ac.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, err
	}
	if cluster == nil && ac.DeletionTimestamp.IsZero() {
		log.FromContext(ctx).Info("waiting for Cluster API to set the owning Cluster")
		return ctrl.Result{}, nil
	}
	if cluster != nil && annotations.IsPaused(cluster, ac) {
		return ctrl.Result{}, nil
	}
	helper, err := patch.NewHelper(ac, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer patchOnReturn(ctx, helper, ac, &reterr)
	clusterName := ac.Name
	if cluster != nil {
		clusterName = cluster.Name
	}
	svc, err := r.Cloud.For(ac.Spec.SubscriptionID)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ac.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, ac, svc, clusterName)
	}
	return r.reconcileNormal(ctx, ac, svc, clusterName)
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

func (r *AzureClusterReconciler) reconcileNormal(ctx context.Context, ac *infrav1.AzureCluster, svc *cloud.Services, clusterName string) (ctrl.Result, error) {
	if controllerutil.AddFinalizer(ac, infrav1.ClusterFinalizer) {
		return ctrl.Result{Requeue: true}, nil // the finalizer is saved before anything is created
	}
	n, err := namesOf(ac, clusterName)
	if err != nil {
		setReady(ac, metav1.ConditionFalse, InvalidConfigurationReason, err.Error())
		return ctrl.Result{}, nil
	}
	if ac.Spec.NetworkSpec.APIServerLB.Type == "Internal" {
		setReady(ac, metav1.ConditionFalse, InvalidConfigurationReason, "internal API-server load balancers are not implemented yet: use type Public")
		return ctrl.Result{}, nil
	}
	loc, sub := ac.Spec.Location, ac.Spec.SubscriptionID
	owned := func(role string) map[string]*string { return tags.Build(clusterName, role, ac.Spec.AdditionalTags) }
	id := func(rg, typ, name string) string {
		return "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Network/" + typ + "/" + name
	}

	if err := svc.Groups.Reconcile(ctx, resourcegroupsSpec(n.rg, loc, owned("resourcegroup"))); err != nil {
		return r.azureError(ac, "resource group", err)
	}
	cpCIDRs := n.cpSubnet.CIDRBlocks
	cpSource := "VirtualNetwork"
	if len(cpCIDRs) > 0 {
		cpSource = cpCIDRs[0]
	}
	actions := []action{
		{step{"securitygroups", n.cpSubnet.SecurityGroup.Name}, func(tok string) (string, bool, error) {
			return svc.NSGs.Reconcile(ctx, securitygroups.Spec{ResourceGroup: n.rg, Name: n.cpSubnet.SecurityGroup.Name, Location: loc, Tags: owned("controlplane-nsg"),
				Rules: append([]securitygroups.Rule{
					{Name: "allow_apiserver", Protocol: "Tcp", Direction: "Inbound", Priority: 2200, DestinationPorts: fmt.Sprint(APIServerPort), Access: "Allow"},
					{Name: "allow_ssh", Protocol: "Tcp", Direction: "Inbound", Priority: 2201, DestinationPorts: "22", Access: "Allow"},
					{Name: "allow_vxlan", Protocol: "Udp", Direction: "Inbound", Priority: 2202, Source: "VirtualNetwork", DestinationPorts: "4789", Access: "Allow"},
				}, userRules(n.cpSubnet)...)}, tok)
		}},
		{step{"securitygroups", n.nodeSubnet.SecurityGroup.Name}, func(tok string) (string, bool, error) {
			return svc.NSGs.Reconcile(ctx, securitygroups.Spec{ResourceGroup: n.rg, Name: n.nodeSubnet.SecurityGroup.Name, Location: loc, Tags: owned("node-nsg"),
				Rules: append([]securitygroups.Rule{
					{Name: "allow_vxlan", Protocol: "Udp", Direction: "Inbound", Priority: 2200, Source: "VirtualNetwork", DestinationPorts: "4789", Access: "Allow"},
					{Name: "allow_kubelet", Protocol: "Tcp", Direction: "Inbound", Priority: 2201, Source: cpSource, DestinationPorts: "10250", Access: "Allow"},
					{Name: "allow_ssh_from_controlplane", Protocol: "Tcp", Direction: "Inbound", Priority: 2202, Source: cpSource, DestinationPorts: "22", Access: "Allow"},
					{Name: "allow_rdp_in_vnet", Protocol: "Tcp", Direction: "Inbound", Priority: 2203, Source: "VirtualNetwork", DestinationPorts: "3389", Access: "Allow"},
				}, userRules(n.nodeSubnet)...)}, tok)
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
			return r.reconcileVNet(ctx, svc, ac, n, clusterName, id, tok)
		}},
		{step{"publicips", n.apiIP}, func(tok string) (string, bool, error) {
			return svc.PublicIPs.Reconcile(ctx, publicips.Spec{ResourceGroup: n.rg, Name: n.apiIP, Location: loc, DNSLabel: strings.ToLower(clusterName), Tags: owned("apiserver-ip")}, tok)
		}},
		{step{"loadbalancers", n.lb}, func(tok string) (string, bool, error) {
			return svc.LBs.Reconcile(ctx, loadbalancers.Spec{ResourceGroup: n.rg, Name: n.lb, Location: loc, SubscriptionID: sub, PublicIPID: id(n.rg, "publicIPAddresses", n.apiIP), Port: APIServerPort, Tags: owned("apiserver-lb")}, tok)
		}},
	}
	pending, failed, err := runActions(&ac.Status.LongRunningOperationStates, n.rg, "PUT", actions)
	if err != nil {
		return r.azureError(ac, failed.service+" "+failed.name, err)
	}
	if pending != nil {
		setReady(ac, metav1.ConditionFalse, ProvisioningReason, fmt.Sprintf("creating %s %s", pending.service, pending.name))
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}

	ip, err := svc.PublicIPs.Get(ctx, n.rg, n.apiIP)
	if err != nil || ip == nil || ip.Properties.IPAddress == nil {
		return r.azureError(ac, "API server IP", fmt.Errorf("reading the API server's public IP: %v", err))
	}
	if ac.Spec.ControlPlaneEndpoint.Host == "" {
		ac.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: *ip.Properties.IPAddress, Port: APIServerPort}
	}
	zones, err := svc.SKUs.Zones(ctx, loc)
	if err != nil {
		return r.azureError(ac, "zones", err)
	}
	ac.Status.FailureDomains = nil
	for _, z := range zones {
		ac.Status.FailureDomains = append(ac.Status.FailureDomains, clusterv1.FailureDomain{Name: z, ControlPlane: ptr.To(true)})
	}
	ac.Status.Initialization.Provisioned = ptr.To(true)
	setReady(ac, metav1.ConditionTrue, ProvisionedReason, "")
	return ctrl.Result{}, nil
}

func userRules(s infrav1.SubnetSpec) []securitygroups.Rule {
	var out []securitygroups.Rule
	for _, r := range s.SecurityGroup.SecurityRules {
		access := r.Action
		if access == "" {
			access = "Allow"
		}
		ports := r.DestinationPorts
		if ports == "" {
			ports = "*"
		}
		out = append(out, securitygroups.Rule{Name: r.Name, Protocol: r.Protocol, Direction: r.Direction, Priority: r.Priority, Source: r.Source, DestinationPorts: ports, Access: access})
	}
	return out
}

// reconcileVNet creates the VNet with its subnets, or, for a VNet the user
// brought (not tagged as the cluster's), only adds the cluster's subnets.
func (r *AzureClusterReconciler) reconcileVNet(ctx context.Context, svc *cloud.Services, ac *infrav1.AzureCluster, n clusterNames, clusterName string, id func(rg, typ, name string) string, tok string) (string, bool, error) {
	var subnets []vnets.Subnet
	for _, s := range ac.Spec.NetworkSpec.Subnets {
		sn := vnets.Subnet{Name: s.Name, CIDRs: s.CIDRBlocks, NSGID: id(n.rg, "networkSecurityGroups", s.SecurityGroup.Name)}
		if s.Role == infrav1.SubnetNode {
			sn.RouteTableID = id(n.rg, "routeTables", n.routeTable)
			sn.NatGatewayID = id(n.rg, "natGateways", n.natGateway)
		}
		subnets = append(subnets, sn)
	}
	if tok == "" {
		cur, err := svc.VNets.Get(ctx, n.vnetRG, n.vnet)
		if err != nil {
			return "", false, err
		}
		if cur != nil && !tags.IsOwned(cur.Tags, clusterName) {
			for _, sn := range subnets {
				next, done, err := svc.Subnets.Reconcile(ctx, n.vnetRG, n.vnet, sn, "")
				if err != nil || !done {
					return next, false, err
				}
			}
			return "", true, nil
		}
	}
	return svc.VNets.Reconcile(ctx, vnets.Spec{ResourceGroup: n.vnetRG, Name: n.vnet, Location: ac.Spec.Location, CIDRs: ac.Spec.NetworkSpec.Vnet.CIDRBlocks,
		Subnets: subnets, Tags: tags.Build(clusterName, "vnet", ac.Spec.AdditionalTags)}, tok)
}

func (r *AzureClusterReconciler) azureError(obj interface {
	client.Object
	SetConditions([]metav1.Condition)
	GetConditions() []metav1.Condition
}, what string, err error) (ctrl.Result, error) {
	setReady(obj, metav1.ConditionFalse, AzureErrorReason, fmt.Sprintf("%s: %v", what, err))
	return ctrl.Result{}, fmt.Errorf("%s: %w", what, err)
}

func (r *AzureClusterReconciler) reconcileDelete(ctx context.Context, ac *infrav1.AzureCluster, svc *cloud.Services, clusterName string) (ctrl.Result, error) {
	setReady(ac, metav1.ConditionFalse, DeletingReason, "deleting the cluster's Azure resources")
	n, err := namesOf(ac, clusterName)
	if err != nil {
		// Nothing can have been created from a spec that incomplete.
		controllerutil.RemoveFinalizer(ac, infrav1.ClusterFinalizer)
		return ctrl.Result{}, nil
	}
	g, err := svc.Groups.Get(ctx, n.rg)
	if err != nil {
		return r.azureError(ac, "resource group", err)
	}
	var actions []action
	if g != nil && tags.IsOwned(g.Tags, clusterName) {
		// The group is winkube's: deleting it deletes everything in it.
		actions = append(actions, action{step{"resourcegroups", n.rg}, func(tok string) (string, bool, error) { return svc.Groups.Delete(ctx, n.rg, tok) }})
	} else if g != nil {
		actions = append(actions,
			action{step{"loadbalancers", n.lb}, func(tok string) (string, bool, error) { return svc.LBs.Delete(ctx, n.rg, n.lb, tok) }},
			action{step{"publicips", n.apiIP}, func(tok string) (string, bool, error) { return svc.PublicIPs.Delete(ctx, n.rg, n.apiIP, tok) }},
			action{step{"vnets", n.vnet}, func(tok string) (string, bool, error) {
				cur, err := svc.VNets.Get(ctx, n.vnetRG, n.vnet)
				if err != nil || cur == nil {
					return "", err == nil, err
				}
				if tags.IsOwned(cur.Tags, clusterName) {
					return svc.VNets.Delete(ctx, n.vnetRG, n.vnet, tok)
				}
				for _, s := range ac.Spec.NetworkSpec.Subnets {
					if next, done, err := svc.Subnets.Delete(ctx, n.vnetRG, n.vnet, s.Name, ""); err != nil || !done {
						return next, false, err
					}
				}
				return "", true, nil
			}},
			action{step{"natgateways", n.natGateway}, func(tok string) (string, bool, error) { return svc.NatGateways.Delete(ctx, n.rg, n.natGateway, tok) }},
			action{step{"publicips", n.natGWIP}, func(tok string) (string, bool, error) { return svc.PublicIPs.Delete(ctx, n.rg, n.natGWIP, tok) }},
			action{step{"routetables", n.routeTable}, func(tok string) (string, bool, error) { return svc.RouteTables.Delete(ctx, n.rg, n.routeTable, tok) }},
			action{step{"securitygroups", n.cpSubnet.SecurityGroup.Name}, func(tok string) (string, bool, error) {
				return svc.NSGs.Delete(ctx, n.rg, n.cpSubnet.SecurityGroup.Name, tok)
			}},
			action{step{"securitygroups", n.nodeSubnet.SecurityGroup.Name}, func(tok string) (string, bool, error) {
				return svc.NSGs.Delete(ctx, n.rg, n.nodeSubnet.SecurityGroup.Name, tok)
			}},
		)
	}
	pending, failed, err := runActions(&ac.Status.LongRunningOperationStates, n.rg, "DELETE", actions)
	if err != nil {
		return r.azureError(ac, "deleting "+failed.service+" "+failed.name, err)
	}
	if pending != nil {
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	controllerutil.RemoveFinalizer(ac, infrav1.ClusterFinalizer)
	return ctrl.Result{}, nil
}
