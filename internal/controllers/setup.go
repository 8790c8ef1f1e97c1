package controllers

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/winkube/winkube/internal/azure/cloud"
)

// Options configure winkube's controllers.
type Options struct {
	Cloud *cloud.Cloud
	// Concurrency is the number of objects of each kind reconciled at once.
	Concurrency int
	// Requeue is how soon an operation under way is looked at again.
	Requeue time.Duration
	// SkipNameValidation lets several managers run in one process (tests
	// that restart the manager).
	SkipNameValidation bool
}

// Setup registers every winkube controller with the manager.
func Setup(mgr ctrl.Manager, o Options) error {
	opts := controller.Options{MaxConcurrentReconciles: o.Concurrency, SkipNameValidation: &o.SkipNameValidation}
	if err := (&AzureClusterReconciler{Client: mgr.GetClient(), Cloud: o.Cloud, Requeue: o.Requeue}).SetupWithManager(mgr, opts); err != nil {
		return err
	}
	return (&AzureMachineReconciler{Client: mgr.GetClient(), Cloud: o.Cloud, Requeue: o.Requeue}).SetupWithManager(mgr, opts)
}
