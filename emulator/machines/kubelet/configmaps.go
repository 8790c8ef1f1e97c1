package kubelet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/winkube/winkube/namedwatch"
)

// WatchedConfigMaps returns c with its ConfigMap GETs served the way the
// kubelet's ConfigMap manager serves them (its default Watch strategy):
// each ConfigMap a read names gets a watch of its own (namedwatch, with
// the kubelet's idle time and first-list wait), and reads come from what
// the watch last saw. Before, every container start read each
// ConfigMap its environment and volumes name from the API server, a dozen
// times per pod. Every other request goes to c; the watches end when done
// closes.
func WatchedConfigMaps(c kubernetes.Interface, done <-chan struct{}) kubernetes.Interface {
	return &cachedClient{Interface: c, core: &cachedCore{CoreV1Interface: c.CoreV1(), watches: newConfigMapWatches(c, done)}}
}

func newConfigMapWatches(c kubernetes.Interface, done <-chan struct{}) *cmWatches {
	return namedwatch.New[*corev1.ConfigMap, *corev1.ConfigMapList](corev1.Resource("configmaps"), c.CoreV1().ConfigMaps, done, namedwatch.Options{})
}

// cachedClient is a client whose ConfigMap reads and, when it has an
// informer of them, Service reads come from the kubelet's own caches.
type cachedClient struct {
	kubernetes.Interface
	core *cachedCore
}

func (c *cachedClient) CoreV1() typedcorev1.CoreV1Interface { return c.core }

type cachedCore struct {
	typedcorev1.CoreV1Interface
	watches  *cmWatches
	services *svcCache // nil: Services go to the API server
}

func (c *cachedCore) ConfigMaps(ns string) typedcorev1.ConfigMapInterface {
	return &cmNamespace{ConfigMapInterface: c.CoreV1Interface.ConfigMaps(ns), ns: ns, watches: c.watches}
}

func (c *cachedCore) Services(ns string) typedcorev1.ServiceInterface {
	if c.services == nil {
		return c.CoreV1Interface.Services(ns)
	}
	return &svcNamespace{ServiceInterface: c.CoreV1Interface.Services(ns), ns: ns, cache: c.services}
}

type cmNamespace struct {
	typedcorev1.ConfigMapInterface
	ns      string
	watches *cmWatches
}

// Get reads the ConfigMap from its watch; a read at a resource version
// goes to the API server.
func (c *cmNamespace) Get(ctx context.Context, name string, o metav1.GetOptions) (*corev1.ConfigMap, error) {
	if o.ResourceVersion != "" {
		return c.ConfigMapInterface.Get(ctx, name, o)
	}
	cm, ok, err := c.watches.Get(ctx, c.ns, name)
	if !ok {
		// The watch has not listed yet: the kubelet's manager would
		// wait, the API server answers at once.
		return c.ConfigMapInterface.Get(ctx, name, o)
	}
	if err != nil {
		return nil, err
	}
	// Callers own what they get, as from the API server.
	return cm.DeepCopy(), nil
}

// cmWatches are the per-name watches of ConfigMaps.
type cmWatches = namedwatch.Watches[*corev1.ConfigMap, *corev1.ConfigMapList, typedcorev1.ConfigMapInterface]
