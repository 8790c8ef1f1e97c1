package testenv

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// warmWatchCaches returns once the API server serves a LIST of every
// served version of crds from its watch cache.
//
// kube-apiserver makes a custom resource's storage, and so its watch
// cache, on the first request for it (apiextensions-apiserver
// pkg/apiserver/customresource_handler.go, getOrCreateServingInfoFor,
// kubernetes v1.36.3), and until that cache has synced it refuses a LIST
// without a limit, and every WATCH, with 429 and Retry-After: 1
// (k8s.io/apiserver pkg/storage/cacher/cacher.go GetList and Watch,
// delegator.go; KEP-4568, its ResilientWatchCacheInitialization gate
// locked on since v1.34). client-go honours the header (rest/with_retry.go)
// and a reflector backs off as long, so the first test to list or watch
// each kind sat out a second or two with both cores idle. Asked here
// without client-go's retries, the caches are ready in milliseconds.
func warmWatchCaches(ctx context.Context, cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	rc := cs.Discovery().RESTClient()
	var paths []string
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if v.Served {
				paths = append(paths, "/apis/"+crd.Spec.Group+"/"+v.Name+"/"+crd.Spec.Names.Plural)
			}
		}
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pending := paths[:0]
		for _, p := range paths {
			err := rc.Get().AbsPath(p).MaxRetries(0).Do(ctx).Error()
			switch {
			case err == nil:
			case apierrors.IsTooManyRequests(err):
				pending, last = append(pending, p), err
			default:
				return false, fmt.Errorf("testenv: listing %s: %w", p, err)
			}
		}
		paths = pending
		return len(paths) == 0, nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("testenv: the watch caches of %v did not sync: %w", paths, last)
	}
	return err
}
