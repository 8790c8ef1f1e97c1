package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/winkube/winkube/namedwatch"
)

// SecretWatch keeps the few Secrets it is asked for (the identities' Secrets
// in use) up to date, each through a watch of its own selecting it by name,
// the way the kubelet keeps the Secrets and ConfigMaps its pods reference
// (namedwatch, with a cap). The manager caches no other Secret
// (SecretCache), and reading an identity's Secret no longer costs a GET per
// reconcile of every AzureCluster, AzureMachine and pool machine: the
// management API server's largest share of requests at bring-up.
type SecretWatch struct {
	client kubernetes.Interface
	done   <-chan struct{}
	w      *namedwatch.Watches[*corev1.Secret, *corev1.SecretList, typedcorev1.SecretInterface]
}

// secretWatchSync bounds the wait for a new watch's first list; a read
// that outlasts it goes to the API server.
const secretWatchSync = 5 * time.Second

// secretWatchMax caps the watches: each costs the manager an informer, a
// goroutine and a long-lived watch on the API server, and tenants choose
// how many identities name distinct Secrets, so without a cap they choose
// how many the manager opens. An operator's clusters use a handful of
// identities; 256 leaves room for many while bounding what a tenant can
// make the manager hold. A Secret beyond it is read from the API server, as
// one whose watch has not listed it yet.
const secretWatchMax = 256

// NewSecretWatch returns a SecretWatch whose watches end when done closes.
func NewSecretWatch(c kubernetes.Interface, done <-chan struct{}) *SecretWatch {
	return newSecretWatch(c, done, secretWatchMax)
}

func newSecretWatch(c kubernetes.Interface, done <-chan struct{}, max int) *SecretWatch {
	// An unused Secret's watch stays as long as the kubelet keeps one
	// (namedwatch's default).
	o := namedwatch.Options{Sync: secretWatchSync, Max: max}
	return &SecretWatch{client: c, done: done, w: namedwatch.New[*corev1.Secret, *corev1.SecretList](corev1.Resource("secrets"), c.CoreV1().Secrets, done, o)}
}

// newManagerSecretWatch is a SecretWatch whose watches last as long as the
// manager runs.
func newManagerSecretWatch(mgr ctrl.Manager) (*SecretWatch, error) {
	c, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		close(done)
		return nil
	})); err != nil {
		return nil, err
	}
	return NewSecretWatch(c, done), nil
}

// Get returns the Secret as its watch last saw it; ok is false when the
// watch has not listed it yet, or when no watch is started for it because
// secretWatchMax are running (the caller reads it from the API server).
// A Secret the watch does not have is NotFound. Callers must not modify
// it.
func (w *SecretWatch) Get(ctx context.Context, key types.NamespacedName) (s *corev1.Secret, ok bool, err error) {
	return w.w.Get(ctx, key.Namespace, key.Name)
}
