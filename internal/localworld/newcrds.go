package localworld

import (
	"context"
	"fmt"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Two custom-resource behaviours of kube-apiserver that only a management
// plane started seconds ago meets: the local world starts its API server,
// installs the CRDs and creates a cluster within a few seconds, where a
// management cluster's CRDs were installed by clusterctl init long before.

// createWindow is how long after a CRD is established kube-apiserver holds
// each create of its resources: it sleeps 2 s before the create, so that
// in a highly available control plane every server has seen the CRD
// established before a follow-up read (customresource_handler.go
// serveResource, "justCreated", k8s.io/apiextensions-apiserver v0.36.3).
const createWindow = 2 * time.Second

// warmWatchCaches reads each custom resource once, so that the management
// API server builds the resource's storage and its watch cache before the
// controllers' informers ask for them.
//
// kube-apiserver builds a custom resource's storage, and with it the watch
// cache, at the resource's first request, not when the CRD is established.
// A watch that arrives before the cache has filled from etcd is answered
// 429 "storage is (re)initializing" with Retry-After 1, and client-go's
// reflector waits its backoff (0.8 to 1.6 s) before the next try
// (tools/cache/reflector.go watchList, client-go v0.36.3). A manager
// started the moment its CRDs are installed met that twice, once for the
// informers set up with the controllers and once for those they add as they
// start: 2 s of the small world's bring-up. A management cluster's API
// server has long served those resources by the time a provider's Pod
// starts, so the wait is the local world's, not one a real install pays.
// A read that fails changes nothing: the informer then waits as before.
func warmWatchCaches(ctx context.Context, cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(crds))
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Storage {
				continue
			}
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
					errs <- fmt.Errorf("%s: %w", gvr, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitCreateWindow waits until the CRDs of the groups given have been
// established for createWindow, so that the cluster's creates are not each
// held 2 s: waiting out the rest of the window costs less than the sleep.
// The condition's time has whole seconds, as the API server's check reads
// it, so the wait ends when that check passes.
func waitCreateWindow(ctx context.Context, c client.Reader, groups map[string]bool) error {
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		return err
	}
	var newest time.Time
	for _, crd := range crds.Items {
		if !groups[crd.Spec.Group] {
			continue
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue && cond.LastTransitionTime.After(newest) {
				newest = cond.LastTransitionTime.Time
			}
		}
	}
	wait := time.Until(newest.Add(createWindow))
	if newest.IsZero() || wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
