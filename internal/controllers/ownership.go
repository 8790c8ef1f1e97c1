package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/roleassignments"
	"github.com/winkube/winkube/internal/azure/scalesets"
	"github.com/winkube/winkube/internal/azure/subnets"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

// Deletion never guesses. What an object created is known in one of two ways:
//
//   - resources that carry tags are the cluster's when tagged
//     tags.ClusterKey(cluster)=owned (and, for a machine's, its role tag);
//   - every resource an object creates is also recorded by ARM ID in its
//     status.createdResources before it is created, so that deletion finds
//     it without the Cluster or AzureCluster, and so that resources without
//     tags (subnets, OS disks, NAT rules) are known to be winkube's.
//
// Records alone prove nothing (they are read back from annotations anyone who
// creates the object writes): each recorded resource is checked against Azure
// before it is deleted (proof, below).
//
// Deletion removes only such resources; an Azure answer other than NotFound
// keeps the finalizer, says what blocks on the Ready condition, and retries
// with the controller's backoff.

// armID is the ARM ID of a resource in a resource group; children are
// further type/name pairs.
func armID(sub, rg, provider, typ, name string, children ...string) string {
	id := resourceGroupID(sub, rg) + "/providers/" + provider + "/" + typ + "/" + name
	for _, c := range children {
		id += "/" + c
	}
	return id
}

// resourceGroupID is the ARM ID of a resource group.
func resourceGroupID(sub, rg string) string {
	return "/subscriptions/" + sub + "/resourceGroups/" + rg
}

func isClaimed(list []string, id string) bool {
	for _, x := range list {
		if strings.EqualFold(x, id) {
			return true
		}
	}
	return false
}

// claim records id; it reports whether id was new.
func claim(list *[]string, id string) bool {
	if isClaimed(*list, id) {
		return false
	}
	*list = append(*list, id)
	return true
}

func unclaim(list *[]string, id string) {
	out := (*list)[:0]
	for _, x := range *list {
		if !strings.EqualFold(x, id) {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		out = nil
	}
	*list = out
}

// kindOf is a resource's type path ("virtualMachines",
// "loadBalancers/inboundNatRules") and its parsed ID.
func kindOf(id string) (string, *arm.ResourceID, error) {
	r, err := arm.ParseResourceID(id)
	if err != nil {
		return "", nil, fmt.Errorf("recorded resource %q is not an ARM ID: %w", id, err)
	}
	return strings.Join(r.ResourceType.Types, "/"), r, nil
}

// deleteOrder is the order Azure lets a machine's resources go: the VM
// before its disk and NIC, the NIC before the NAT rule it uses, the scale
// set, subnets (which NICs use), and availability sets (empty only once
// their VMs are gone) last. Role assignments go first, while the VM whose
// identity they grant still exists to prove them the machine's.
var deleteOrder = map[string]int{
	"roleassignments": -1, "virtualmachines": 0, "virtualmachinescalesets": 0, "disks": 1, "networkinterfaces": 2,
	"loadbalancers/inboundnatrules": 3, "virtualnetworks/subnets": 4, "availabilitysets": 5,
}

// sortForDeletion orders recorded IDs for deletion.
func sortForDeletion(ids []string) []string {
	out := append([]string(nil), ids...)
	rank := func(id string) int {
		k, _, err := kindOf(id)
		if err != nil {
			return 99
		}
		if r, ok := deleteOrder[strings.ToLower(k)]; ok {
			return r
		}
		return 50
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

// stepOf is the futures key of a recorded resource.
func stepOf(id string) step {
	k, r, err := kindOf(id)
	if err != nil {
		return step{"unknown", id}
	}
	return step{strings.ToLower(strings.ReplaceAll(k, "/", "-")), r.Name}
}

// subscriptionOf is the subscription of recorded IDs.
func subscriptionOf(ids []string) (string, error) {
	for _, id := range ids {
		if _, r, err := kindOf(id); err == nil && r.SubscriptionID != "" {
			return r.SubscriptionID, nil
		}
	}
	return "", fmt.Errorf("no subscription in the recorded resources %v", ids)
}

// deleteByID deletes one recorded resource; NotFound is done.
func deleteByID(ctx context.Context, svc *cloud.Services, id, token string) (string, bool, error) {
	k, r, err := kindOf(id)
	if err != nil {
		return "", false, err
	}
	rg := r.ResourceGroupName
	switch strings.ToLower(k) {
	case "virtualmachines":
		return svc.VMs.Delete(ctx, rg, r.Name, token)
	case "disks":
		return svc.Disks.Delete(ctx, rg, r.Name, token)
	case "networkinterfaces":
		return svc.NICs.Delete(ctx, rg, r.Name, token)
	case "loadbalancers/inboundnatrules":
		return svc.NatRules.Delete(ctx, rg, r.Parent.Name, r.Name, token)
	case "virtualnetworks/subnets":
		return svc.Subnets.Delete(ctx, rg, r.Parent.Name, r.Name, token)
	case "virtualmachinescalesets":
		return svc.ScaleSets.Delete(ctx, rg, r.Name, token)
	case "roleassignments":
		// Synchronous: done once the DELETE answers.
		err := svc.Roles.Delete(ctx, id)
		return "", err == nil, err
	}
	return "", false, fmt.Errorf("winkube does not know how to delete recorded resource %s", id)
}

// blocked reports on the Ready condition what keeps an object's deletion
// (and its finalizer) waiting, and returns err so that the controller
// retries with backoff.
func blocked(obj conditions.Setter, what string, err error) error {
	msg := fmt.Sprintf("deleting %s: %s; the finalizer stays until Azure confirms it is gone", what, describe(err))
	if ie := (*identityError)(nil); errors.As(err, &ie) {
		msg = deletionNeedsIdentity(obj, what, ie)
	}
	setReady(obj, metav1.ConditionFalse, DeletionBlockedReason, msg)
	return fmt.Errorf("deleting %s: %w", what, err)
}

// readBlocked reports a read of the management cluster that failed with
// something other than NotFound: until it succeeds, nothing can be decided.
func readBlocked(obj conditions.Setter, deleting bool, what string, err error) error {
	reason := AzureErrorReason
	if deleting {
		reason = DeletionBlockedReason
	}
	setReady(obj, metav1.ConditionFalse, reason, fmt.Sprintf("reading %s: %v; retrying", what, err))
	return fmt.Errorf("reading %s: %w", what, err)
}

// notOwned reports whether err is a refusal to touch someone else's resource.
func notOwned(err error) bool {
	var t *tags.NotOwnedError
	var s *subnets.ExistsError
	var r *roleassignments.ConflictError
	return errors.As(err, &t) || errors.As(err, &s) || errors.As(err, &r)
}

// gone tells NotFound (the object is gone) from other errors.
func gone(err error) bool { return apierrors.IsNotFound(err) }

// ownerOf is the owner of a cluster's resources: the cluster's name and its
// namespace. Resources tagged before winkube wrote namespace tags are
// adopted (tags.Owner.AdoptUnscoped) only while no AzureCluster of another
// namespace belongs to a cluster of the same name: then nothing else could
// have made them, and the next write tags them with the namespace. While the
// name is shared, no one adopts them: a tenant cannot take another
// namespace's resources by naming its cluster alike, and its owner adds the
// namespace tag by hand (the condition says which).
func ownerOf(ctx context.Context, c client.Reader, clusterName, namespace string) (tags.Owner, error) {
	o := tags.Owner{Cluster: clusterName, Namespace: namespace, AdoptUnscoped: true}
	list := &infrav1.AzureClusterList{}
	if err := c.List(ctx, list); err != nil {
		return o, fmt.Errorf("listing AzureClusters to tell whose resources are tagged %s: %w", tags.ClusterKey(clusterName), err)
	}
	for i := range list.Items {
		if ac := &list.Items[i]; ac.Namespace != namespace && clusterNameOf(ac) == clusterName {
			o.AdoptUnscoped = false
		}
	}
	return o, nil
}

// proof is what makes a recorded resource provably an object's in Azure.
// Records come back from annotations that whoever creates the object writes
// (clusterctl move does, and so can a tenant), so each one is checked
// against what Azure says before it is deleted (or written):
//
//   - a tagged resource (VM, NIC, scale set, availability set) must carry the
//     owner's cluster and namespace tags, and the object's role tag when the
//     object has one (a machine's or pool's, which names its namespace);
//   - an inbound NAT rule is its load balancer's, which must be the owner's;
//   - a subnet in a user's VNet must use one of the cluster's own security
//     groups, which must be the owner's;
//   - an OS disk must be attached to a VM that passes (Azure deletes it
//     with the VM: deleteOSDiskWithVM);
//   - a role assignment must grant one of the object's own VMs' or scale
//     sets' identities (which is why assignments go before VMs);
//   - an ID of a type the object never records is forged.
//
// A resource that fails is forgotten with a Warning event, never deleted.
type proof struct {
	owner tags.Owner
	role  string
	kinds []string
	nsgs  []string
}

// errUnprovable is a recorded resource Azure does not show as the
// object's.
type errUnprovable struct{ id, why string }

func (e *errUnprovable) Error() string {
	return fmt.Sprintf("recorded resource %s is not provably this object's (%s): winkube forgets it and does not delete it", e.id, e.why)
}

// check returns nil when Azure shows id as the object's (or id is gone),
// *errUnprovable when it does not, or Azure's error.
func (p *proof) check(ctx context.Context, svc *cloud.Services, id string, recorded []string) error {
	k, r, err := kindOf(id)
	if err != nil {
		return &errUnprovable{id, err.Error()}
	}
	kind := strings.ToLower(k)
	if !slices.Contains(p.kinds, kind) {
		return &errUnprovable{id, "this kind of object never records a " + k}
	}
	if !strings.EqualFold(r.SubscriptionID, svc.Subscription) {
		return &errUnprovable{id, "it is in another subscription than the object's"}
	}
	rg := r.ResourceGroupName
	tagged := func(exists bool, t map[string]*string) error {
		if !exists {
			return nil
		}
		return p.tagged(id, t)
	}
	switch kind {
	case "virtualmachines":
		vm, err := svc.VMs.Get(ctx, rg, r.Name)
		if err != nil {
			return err
		}
		return tagged(vm != nil, tagsOf(vm != nil, func() map[string]*string { return vm.Tags }))
	case "networkinterfaces":
		nic, err := svc.NICs.Get(ctx, rg, r.Name)
		if err != nil {
			return err
		}
		return tagged(nic != nil, tagsOf(nic != nil, func() map[string]*string { return nic.Tags }))
	case "virtualmachinescalesets":
		set, err := svc.ScaleSets.Get(ctx, rg, r.Name)
		if err != nil {
			return err
		}
		return tagged(set != nil, tagsOf(set != nil, func() map[string]*string { return set.Tags }))
	case "availabilitysets":
		set, err := svc.AvSets.Get(ctx, rg, r.Name)
		if err != nil || set == nil {
			return err
		}
		if !p.owner.Owns(set.Tags) {
			return &errUnprovable{id, "it lacks the cluster's ownership tags"}
		}
		return nil
	case "loadbalancers/inboundnatrules":
		lb, err := svc.LBs.Get(ctx, rg, r.Parent.Name)
		if err != nil || lb == nil {
			return err
		}
		if !p.owner.Owns(lb.Tags) {
			return &errUnprovable{id, "its load balancer is not the cluster's"}
		}
		return nil
	case "virtualnetworks/subnets":
		sn, err := svc.Subnets.Get(ctx, rg, r.Parent.Name, r.Name)
		if err != nil || sn == nil {
			return err
		}
		var nsg string
		if sn.Properties != nil && sn.Properties.NetworkSecurityGroup != nil {
			nsg = ptr.Deref(sn.Properties.NetworkSecurityGroup.ID, "")
		}
		if nsg == "" || !slices.ContainsFunc(p.nsgs, func(x string) bool { return strings.EqualFold(x, nsg) }) {
			return &errUnprovable{id, "it does not use one of the cluster's security groups"}
		}
		_, nr, err := kindOf(nsg)
		if err != nil {
			return &errUnprovable{id, err.Error()}
		}
		g, err := svc.NSGs.Get(ctx, nr.ResourceGroupName, nr.Name)
		if err != nil {
			return err
		}
		if g == nil || !p.owner.Owns(g.Tags) {
			return &errUnprovable{id, "its security group is not the cluster's"}
		}
		return nil
	case "disks":
		d, err := svc.Disks.Get(ctx, rg, r.Name)
		if err != nil || d == nil {
			return err
		}
		if m := ptr.Deref(d.ManagedBy, ""); m != "" {
			if !isClaimed(recorded, m) {
				return &errUnprovable{id, "it is attached to " + m + ", which this object did not make"}
			}
			return p.check(ctx, svc, m, recorded)
		}
		if len(d.Tags) > 0 {
			return tagged(true, d.Tags)
		}
		// An unattached OS disk carries nothing that names its VM's owner,
		// and its name proves nothing (a record may name any VM that is
		// gone): winkube's VMs delete their disks with them instead.
		return &errUnprovable{id, "it is attached to no VM and has no tags"}
	case "roleassignments":
		a, err := svc.Roles.Get(ctx, id)
		if err != nil || a == nil {
			return err
		}
		principals, err := p.principals(ctx, svc, recorded)
		if err != nil {
			return err
		}
		if pr := roleassignments.PrincipalOf(a); pr == "" || !principals[strings.ToLower(pr)] {
			return &errUnprovable{id, "it grants a principal that is not the identity of a VM or scale set of this object"}
		}
		return nil
	}
	return &errUnprovable{id, "winkube cannot tell whose it is"}
}

// tagged returns nil when tags t show the resource id as the object's: the
// owner's tags, and the object's role tag when it has one; otherwise
// *errUnprovable.
func (p *proof) tagged(id string, t map[string]*string) error {
	switch {
	case p.role != "" && tags.IsOwned(t, p.owner.Cluster) && ptr.Deref(t[tags.RoleKey], "") == p.role:
		// The role names the object's namespace and name: proof enough
		// for a resource tagged before namespace tags existed.
		return nil
	case !p.owner.Owns(t):
		return &errUnprovable{id, fmt.Sprintf("it lacks the tags %s=%s, %s=%s", tags.ClusterKey(p.owner.Cluster), tags.Owned, tags.NamespaceKey(p.owner.Cluster), p.owner.Namespace)}
	case p.role != "" && ptr.Deref(t[tags.RoleKey], "") != p.role:
		return &errUnprovable{id, fmt.Sprintf("its tag %s is not %s", tags.RoleKey, p.role)}
	}
	return nil
}

func tagsOf(exists bool, f func() map[string]*string) map[string]*string {
	if !exists {
		return nil
	}
	return f()
}

// principals are the system-assigned identities of the recorded VMs and
// scale sets that are provably the object's.
func (p *proof) principals(ctx context.Context, svc *cloud.Services, recorded []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, x := range recorded {
		k, r, err := kindOf(x)
		if err != nil {
			continue
		}
		var principal string
		switch strings.ToLower(k) {
		case "virtualmachines":
			vm, err := svc.VMs.Get(ctx, r.ResourceGroupName, r.Name)
			if err != nil {
				return nil, err
			}
			if vm != nil {
				principal = virtualmachines.PrincipalID(vm)
			}
		case "virtualmachinescalesets":
			set, err := svc.ScaleSets.Get(ctx, r.ResourceGroupName, r.Name)
			if err != nil {
				return nil, err
			}
			if set != nil {
				principal = scalesets.PrincipalID(set)
			}
		default:
			continue
		}
		if principal != "" && p.check(ctx, svc, x, recorded) == nil {
			out[strings.ToLower(principal)] = true
		}
	}
	return out, nil
}

// deleteProven deletes a recorded resource once Azure shows it is the
// object's; one that is not is forgotten (unclaimed) and reported through
// forget, never deleted.
func deleteProven(ctx context.Context, svc *cloud.Services, p *proof, created *[]string, id, tok string, forget func(error)) (string, bool, error) {
	if tok == "" {
		if err := p.check(ctx, svc, id, *created); err != nil {
			var u *errUnprovable
			if !errors.As(err, &u) {
				return "", false, err
			}
			unclaim(created, id)
			forget(err)
			return "", true, nil
		}
	}
	next, done, err := deleteByID(ctx, svc, id, tok)
	if done {
		unclaim(created, id)
	}
	return next, done, err
}

// osDiskStep is the futures key of deleteOSDiskWithVM's operation, apart
// from the VM's own so that neither resumes the other's.
func osDiskStep(vm string) step { return step{"virtualmachines/osdisk", vm} }

// deleteOSDiskWithVM has Azure delete the OS disk of a recorded VM made
// before winkube set its deleteOption, before the VM goes: a disk left
// behind could not be proven the object's. A VM that is not provably the
// object's is left alone (its own step forgets it).
func deleteOSDiskWithVM(ctx context.Context, svc *cloud.Services, p *proof, recorded []string, id, tok string) (string, bool, error) {
	_, r, err := kindOf(id)
	if err != nil {
		return "", true, nil
	}
	if tok == "" {
		vm, err := svc.VMs.Get(ctx, r.ResourceGroupName, r.Name)
		if err != nil {
			return "", false, err
		}
		if vm == nil || virtualmachines.DeletesOSDisk(vm) {
			return "", true, nil
		}
		if err := p.check(ctx, svc, id, recorded); err != nil {
			var u *errUnprovable
			if errors.As(err, &u) {
				return "", true, nil
			}
			return "", false, err
		}
	}
	return svc.VMs.DeleteOSDiskWithVM(ctx, r.ResourceGroupName, r.Name, tok)
}

// dropForeignTokens forgets the resume tokens that would poll another host
// than the services' ARM endpoint (async.TokenOnEndpoint): the operation is
// then started or looked up again.
func dropForeignTokens(obj client.Object, svc *cloud.Services) []string {
	_, futures := recordsOf(obj)
	if futures == nil {
		return nil
	}
	var dropped []string
	out := (*futures)[:0]
	for _, f := range *futures {
		if f.Data != "" && !async.TokenOnEndpoint(f.Data, svc.ResourceManager) {
			dropped = append(dropped, f.ServiceName+" "+f.Name)
			continue
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		out = nil
	}
	*futures = out
	return dropped
}
