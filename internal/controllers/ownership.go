package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"

	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/subnets"
	"github.com/winkube/winkube/internal/azure/tags"
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
// Deletion removes only such resources; an Azure answer other than NotFound
// keeps the finalizer, says what blocks on the Ready condition, and retries
// with the controller's backoff.

// armID is the ARM ID of a resource in a resource group; children are
// further type/name pairs.
func armID(sub, rg, provider, typ, name string, children ...string) string {
	id := "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/" + provider + "/" + typ + "/" + name
	for _, c := range children {
		id += "/" + c
	}
	return id
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
// their VMs are gone) last.
var deleteOrder = map[string]int{
	"virtualmachines": 0, "virtualmachinescalesets": 0, "disks": 1, "networkinterfaces": 2,
	"loadbalancers/inboundnatrules": 3, "virtualnetworks/subnets": 4, "availabilitysets": 5, "roleassignments": 6,
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
	setReady(obj, metav1.ConditionFalse, DeletionBlockedReason,
		fmt.Sprintf("deleting %s: %v; the finalizer stays until Azure confirms it is gone", what, err))
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
	return errors.As(err, &t) || errors.As(err, &s)
}

// gone tells NotFound (the object is gone) from other errors.
func gone(err error) bool { return apierrors.IsNotFound(err) }
