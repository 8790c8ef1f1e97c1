package doctor

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// failedReasons are the Ready reasons winkube's controllers set when Azure
// refused or failed a VM or scale set; the condition's message is Azure's.
var failedReasons = map[string]string{
	infrav1.VMProvisionFailedReason:    "fix what Azure reports (the image, its plan), then delete the Machine: its MachineSet or MachinePool makes a new one",
	infrav1.VMFailedReason:             "winkube retries a failed creation (a MachinePool replaces a failed instance) and waits for a VM that ran to be Succeeded again; if it persists, fix what Azure reports (capacity: another size, zone or location) or delete the Machine",
	infrav1.AzureErrorReason:           "fix what Azure reports (quota, VM size, image, zone, permissions); the controller retries by itself",
	infrav1.InvalidConfigurationReason: "correct the AzureMachineTemplate (a new template, referenced from the MachineDeployment) as the message says",
	infrav1.VMNameConflictReason:       "rename the machines so their Windows computer names (15 characters: first 9 + '-' + last 5) differ",
}

// FailedMachines reports AzureMachines and AzureMachinePools of the
// management cluster whose provisioning failed, with Azure's error, and
// machines (scale-set instances too) whose bootstrap failed or is under
// way, with the end of their log and the fix.
func FailedMachines(ctx context.Context, c client.Client, namespace, clusterName string) ([]Finding, error) {
	opts := []client.ListOption{client.InNamespace(namespace)}
	if clusterName != "" {
		opts = append(opts, client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName})
	}
	machines := &infrav1.AzureMachineList{}
	if err := c.List(ctx, machines, opts...); err != nil {
		return nil, err
	}
	pools := &infrav1.AzureMachinePoolList{}
	if err := c.List(ctx, pools, opts...); err != nil {
		return nil, err
	}
	var out []Finding
	for i := range machines.Items {
		m := &machines.Items[i]
		f := failed("AzureMachine", m.ObjectMeta, m.Status.Conditions, m.Status.VMState)
		if len(f) == 0 {
			f = bootstrapFailed("AzureMachine", m.ObjectMeta, m.Status.Conditions)
		}
		out = append(out, f...)
	}
	instances := &infrav1.AzureMachinePoolMachineList{}
	if err := c.List(ctx, instances, opts...); err != nil {
		return nil, err
	}
	for i := range instances.Items {
		m := &instances.Items[i]
		out = append(out, bootstrapFailed("AzureMachinePoolMachine", m.ObjectMeta, m.Status.Conditions)...)
	}
	for i := range pools.Items {
		p := &pools.Items[i]
		out = append(out, failed("AzureMachinePool", p.ObjectMeta, p.Status.Conditions, "")...)
	}
	return out, nil
}

func failed(kind string, m metav1.ObjectMeta, conds []metav1.Condition, vmState string) []Finding {
	for _, c := range conds {
		if c.Type != infrav1.ReadyCondition || c.Status != metav1.ConditionFalse {
			continue
		}
		if fix, ok := failedReasons[c.Reason]; ok {
			return []Finding{{Check: "machines", Severity: Error, Object: ref(kind, m.Namespace, m.Name),
				Message: fmt.Sprintf("%s %s/%s failed (%s): %s", kind, m.Namespace, m.Name, c.Reason, c.Message), Fix: fix}}
		}
	}
	if strings.EqualFold(vmState, "Failed") {
		return []Finding{{Check: "machines", Severity: Error, Object: ref(kind, m.Namespace, m.Name),
			Message: fmt.Sprintf("%s %s/%s: Azure reports the VM's provisioning state Failed", kind, m.Namespace, m.Name),
			Fix:     "read the VM's activity log in Azure; delete the Machine so that a new VM is made"}}
	}
	return nil
}
