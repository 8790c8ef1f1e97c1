package controllers

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/scalesets"
)

// poolMember is what the choice of a pool's instances to delete knows of
// one live instance (none being deleted).
type poolMember struct {
	ID string
	// Current: the instance runs the pool's model (Instance.Current).
	Current bool
	// Ready: provisioned, and its node is Ready (its
	// AzureMachinePoolMachine's Ready condition). Only a Ready instance
	// serves, so only a Ready instance counts as available: CAPZ's
	// machine pool machine is ready only once its node is
	// (azure/scope/machinepoolmachine.go UpdateNodeStatus, Status.Ready =
	// nodeReady, CAPZ 69ec3a40).
	Ready bool
	// Marked: Cluster API asked for its deletion (delete-machine
	// annotation: a scale-down's choice, the autoscaler's).
	Marked bool
	// Failed: Azure reports the instance's provisioning Failed and it is
	// due for replacement (the pool controller waits failedReplaceDelay
	// first). Nothing else replaces it: Cluster API's MachinePool does not
	// act on a Machine's OwnerRemediated condition (v1.14.2), and a failed
	// instance never becomes a node.
	Failed bool
}

// poolRollout is what a pool wants: its replicas, and how far a rollout
// may go above (surge) and below (unavailable) them.
type poolRollout struct {
	Replicas, Surge, Unavailable int64
}

// selectToDelete chooses the instances to delete now, in members' order
// (oldest first), and says how many instances the scale set is to have. It
// follows CAPZ's rolling update (SelectMachinesToDelete in
// azure/scope/strategies/machinepool_deployments/machinepool_deployment_strategy.go,
// CAPZ 69ec3a40):
//   - a Failed instance that never provisioned goes first, whatever the
//     count: it never became a node, and nothing else would ever remove it (a current one at the pool's
//     replicas is beyond no count, a new one of a rollout holds the rollout
//     for ever). Its deletion lowers the scale set's capacity, and the
//     capacity written back (desired, unchanged by it) makes its
//     replacement. CAPZ's rolling update likewise returns the instances
//     Azure reports Failed (or Deleting) before it weighs anything else
//     (SelectMachinesToDelete and getFailedMachines in
//     azure/scope/strategies/machinepool_deployments/machinepool_deployment_strategy.go,
//     kubernetes-sigs/cluster-api-provider-azure
//     128493dd756748e9d3efb0bd274064de48491a86); instances being deleted
//     are not members here at all (rollInstances waits for them);
//   - while some instance runs an older model, the scale set has up to
//     Surge more than Replicas, so that new instances come up before old
//     ones go;
//   - beyond that count, instances Cluster API marked go first;
//   - an old instance whose node is not Ready serves nothing: it goes as
//     long as the pool keeps Replicas - Unavailable instances;
//   - an old instance whose node is Ready goes only while Replicas -
//     Unavailable other instances have Ready nodes (CAPZ's disruption
//     budget). A new instance counts once its node is Ready, not once Azure
//     provisioned it: new instances that never join (a broken image or
//     bootstrap) stop the rollout with the old nodes kept;
//   - whatever is still beyond the count goes, instances without a Ready
//     node first (CAPZ prefers unready machines on a scale-down), old
//     models first, then the oldest.
func selectToDelete(members []poolMember, r poolRollout) (victims []string, desired int64) {
	outdated := 0
	for _, m := range members {
		if !m.Current {
			outdated++
		}
	}
	desired = r.Replicas
	if outdated > 0 {
		desired += r.Surge
	}
	chosen := map[string]bool{}
	pick := func(m poolMember) {
		if !chosen[m.ID] {
			chosen[m.ID] = true
			victims = append(victims, m.ID)
		}
	}
	excess := func() int64 { return int64(len(members)-len(victims)) - desired }
	for _, m := range members {
		if m.Failed {
			pick(m)
		}
	}
	for _, m := range members {
		if m.Marked && excess() > 0 {
			pick(m)
		}
	}
	if outdated > 0 {
		floor := r.Replicas - r.Unavailable
		available := int64(0)
		for _, m := range members {
			if m.Ready && !chosen[m.ID] {
				available++
			}
		}
		for _, m := range members {
			if !m.Current && !m.Ready && !chosen[m.ID] && int64(len(members)-len(victims))-1 >= floor {
				pick(m)
			}
		}
		for _, m := range members {
			if !m.Current && m.Ready && !chosen[m.ID] && available-1 >= floor {
				pick(m)
				available--
			}
		}
	}
	for _, pass := range []func(poolMember) bool{
		func(m poolMember) bool { return !m.Ready && !m.Current },
		func(m poolMember) bool { return !m.Ready },
		func(m poolMember) bool { return !m.Current },
		func(poolMember) bool { return true },
	} {
		for _, m := range members {
			if excess() <= 0 {
				return victims, desired
			}
			if pass(m) {
				pick(m)
			}
		}
	}
	return victims, desired
}

// instanceReady says whether an instance serves: Azure provisioned it and
// its AzureMachinePoolMachine says its node is Ready.
func instanceReady(in scalesets.Instance, m *infrav1.AzureMachinePoolMachine) bool {
	return in.ProvisioningState == "Succeeded" && m != nil && conditions.IsTrue(m, ReadyCondition)
}

// rolloutWaiting says why a rollout chose nothing while the pool has all
// the instances it may have: the new instances' nodes are not Ready. It is
// "" when the rollout is not stuck there.
func rolloutWaiting(members []poolMember, machines map[string]*infrav1.AzureMachinePoolMachine, r poolRollout, victims int) (reason, msg string) {
	var old, waiting, failed []string
	var cause string
	for _, m := range members {
		switch {
		case !m.Current:
			old = append(old, m.ID)
		case !m.Ready:
			waiting = append(waiting, m.ID)
			if c := conditions.Get(machines[m.ID], BootstrapSucceededCondition); c != nil && c.Status == metav1.ConditionFalse && c.Reason == BootstrapFailedReason {
				failed = append(failed, m.ID)
				if cause == "" {
					cause = firstLine(c.Message)
				}
			}
		}
	}
	if len(old) == 0 || victims > 0 || len(waiting) == 0 || int64(len(members)) < r.Replicas+r.Surge {
		return "", ""
	}
	kept := fmt.Sprintf("the %d instances of the old model (%s) are kept until new instances' nodes are Ready (maxSurge %d, maxUnavailable %d)",
		len(old), strings.Join(old, ","), r.Surge, r.Unavailable)
	if len(failed) > 0 {
		return BootstrapFailedReason, fmt.Sprintf("rollout stopped: the bootstrap of new instance %s failed (%s); %s: fix the pool's image or bootstrap configuration",
			strings.Join(failed, ","), cause, kept)
	}
	return WaitingForNodeReason, fmt.Sprintf("rollout waiting for the nodes of new instances %s to be Ready; %s", strings.Join(waiting, ","), kept)
}
