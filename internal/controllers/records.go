package controllers

import (
	"encoding/json"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// What an object created in Azure, and the operations it has under way, are
// kept in its status for people to read, and in annotations for the
// controllers: clusterctl move creates the objects in the target cluster
// without their status (cmd/clusterctl/client/cluster/mover.go
// createTargetObject), and a cluster moved mid-life must still know which
// subnets of a user's VNet are its own, and what to delete.
//
// Records are not trusted for what they say: the webhooks let only the
// manager change them on an existing object, and anyone may write them on
// create (which is what clusterctl move does), so each recorded resource is
// proven in Azure before it is deleted or written (proof, ownership.go), and
// each resume token is checked against the ARM endpoint before it is resumed
// (dropForeignTokens).
const (
	CreatedResourcesAnnotation = infrav1.CreatedResourcesAnnotation
	OperationsAnnotation       = infrav1.OperationsAnnotation
)

func recordsOf(obj client.Object) (*[]string, *infrav1.Futures) {
	switch o := obj.(type) {
	case *infrav1.AzureCluster:
		return &o.Status.CreatedResources, &o.Status.LongRunningOperationStates
	case *infrav1.AzureMachine:
		return &o.Status.CreatedResources, &o.Status.LongRunningOperationStates
	case *infrav1.AzureMachinePool:
		return &o.Status.CreatedResources, &o.Status.LongRunningOperationStates
	case *infrav1.AzureMachinePoolMachine:
		return nil, &o.Status.LongRunningOperationStates
	}
	return nil, nil
}

// restoreRecords fills what the status lacks from the annotations: the
// records of an object whose status was not carried (a move). Recorded
// resources are merged, as one gone already is found gone again; the
// status's operations are the newer when it has any.
func restoreRecords(obj client.Object) {
	created, futures := recordsOf(obj)
	a := obj.GetAnnotations()
	if v := a[CreatedResourcesAnnotation]; created != nil && v != "" {
		var saved []string
		if json.Unmarshal([]byte(v), &saved) == nil {
			for _, id := range saved {
				claim(created, id)
			}
		}
	}
	if v := a[OperationsAnnotation]; futures != nil && len(*futures) == 0 && v != "" {
		var saved infrav1.Futures
		if json.Unmarshal([]byte(v), &saved) == nil {
			*futures = saved
		}
	}
}

// saveRecords writes the status's records into the annotations.
func saveRecords(obj client.Object) {
	created, futures := recordsOf(obj)
	if created == nil && futures == nil {
		return
	}
	a := map[string]string{}
	for k, v := range obj.GetAnnotations() {
		a[k] = v
	}
	set := func(key string, empty bool, v any) {
		if empty {
			delete(a, key)
			return
		}
		if b, err := json.Marshal(v); err == nil {
			a[key] = string(b)
		}
	}
	if created != nil {
		set(CreatedResourcesAnnotation, len(*created) == 0, *created)
	}
	if futures != nil {
		set(OperationsAnnotation, len(*futures) == 0, *futures)
	}
	if len(a) == 0 {
		a = nil
	}
	obj.SetAnnotations(a)
}
