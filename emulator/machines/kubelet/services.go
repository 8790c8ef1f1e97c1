package kubelet

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/winkube/winkube/namedwatch"
)

// Reads returns c with the reads the kubelet serves from its own caches
// served from them: ConfigMaps through a watch of each one a read names
// (WatchedConfigMaps), and Services from an informer of every Service
// that has a cluster IP, as the kubelet's service lister, which builds
// the containers' Service variables (kubernetes/kubernetes
// pkg/kubelet/kubelet.go NewMainKubelet, its informer factory with the
// field selector spec.clusterIP!=None, and kubelet_pods.go
// getServiceEnvVarMap, which lists from it,
// @000d95431f9f9ef4bb8298f8b78684eacbb18fa0). Before, every container
// start read the default namespace's kubernetes Service and listed its
// namespace's Services from the API server: 7 GETs and 7 LISTs per node
// in a bring-up. Every other request goes to c; the watches end when done
// closes.
func Reads(c kubernetes.Interface, done <-chan struct{}) kubernetes.Interface {
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	}), informers.WithTransform(crcache.TransformStripManagedFields()))
	inf := factory.Core().V1().Services()
	svcs := &svcCache{lister: inf.Lister(), synced: inf.Informer().HasSynced}
	factory.Start(done)
	return &cachedClient{Interface: c, core: &cachedCore{CoreV1Interface: c.CoreV1(), watches: newConfigMapWatches(c, done), services: svcs}}
}

type svcCache struct {
	lister listersv1.ServiceLister
	synced cache.InformerSynced
}

// wait waits a little for the informer's first list, as the kubelet
// refuses to build a container's environment before it
// (kubelet_pods.go makeEnvironmentVariables, "services have not yet been
// read at least once"): the start fails and is tried again, rather than
// holding the node's pod worker while the API server does not answer.
func (s *svcCache) wait(ctx context.Context) error {
	if s.synced() {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, namedwatch.DefaultSync)
	defer cancel()
	if cache.WaitForCacheSync(sctx.Done(), s.synced) {
		return nil
	}
	return errors.New("services have not yet been read at least once, cannot construct envvars")
}

type svcNamespace struct {
	typedcorev1.ServiceInterface
	ns    string
	cache *svcCache
}

// Get reads the Service from the informer; a read at a resource version
// goes to the API server. A headless Service is not in the informer:
// NotFound, as for the kubelet, to which it gives no variables.
func (s *svcNamespace) Get(ctx context.Context, name string, o metav1.GetOptions) (*corev1.Service, error) {
	if o.ResourceVersion != "" {
		return s.ServiceInterface.Get(ctx, name, o)
	}
	if err := s.cache.wait(ctx); err != nil {
		return nil, err
	}
	svc, err := s.cache.lister.Services(s.ns).Get(name)
	if err != nil {
		return nil, err
	}
	// Callers own what they get, as from the API server.
	return svc.DeepCopy(), nil
}

// List lists the namespace's Services from the informer; a list with
// selectors or paging goes to the API server.
func (s *svcNamespace) List(ctx context.Context, o metav1.ListOptions) (*corev1.ServiceList, error) {
	if o.LabelSelector != "" || o.FieldSelector != "" || o.ResourceVersion != "" || o.Limit != 0 || o.Continue != "" {
		return s.ServiceInterface.List(ctx, o)
	}
	if err := s.cache.wait(ctx); err != nil {
		return nil, err
	}
	svcs, err := s.cache.lister.Services(s.ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := &corev1.ServiceList{Items: make([]corev1.Service, 0, len(svcs))}
	for _, svc := range svcs {
		out.Items = append(out.Items, *svc.DeepCopy())
	}
	return out, nil
}
