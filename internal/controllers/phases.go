package controllers

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
)

// phase is one step of a reconcile. A non-nil result or an error ends the
// reconcile with them; nil and nil go on to the next phase.
type phase[S any] func(ctx context.Context, s S) (*ctrl.Result, error)

// runPhases runs a reconcile's phases in order, as Cluster API's
// reconcilers do (doReconcile in core/reconcilers/machine/machine_controller.go
// and core/reconcilers/cluster/cluster_controller.go, sigs.k8s.io/cluster-api
// v1.14.2). Cluster API runs every phase and joins their errors; here a
// phase that ends the reconcile stops it, because each phase needs what the
// one before made in Azure (a NIC before its VM, a VNet before its subnets),
// and a reconcile that stopped resumes from the first phase next time: every
// phase is idempotent.
func runPhases[S any](ctx context.Context, s S, phases ...phase[S]) (ctrl.Result, error) {
	for _, p := range phases {
		if res, err := p(ctx, s); res != nil || err != nil {
			if res == nil {
				res = &ctrl.Result{}
			}
			return *res, err
		}
	}
	return ctrl.Result{}, nil
}

// stop ends a reconcile in a phase with what a (ctrl.Result, error) helper
// returned.
func stop(res ctrl.Result, err error) (*ctrl.Result, error) { return &res, err }
