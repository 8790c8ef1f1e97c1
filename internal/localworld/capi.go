package localworld

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/reconcilers/kubeadmcontrolplane"
	"sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	"sigs.k8s.io/cluster-api/core/reconcilers/clusterresourceset"
	"sigs.k8s.io/cluster-api/core/reconcilers/clusterresourcesetbinding"
	"sigs.k8s.io/cluster-api/core/reconcilers/machine"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinepool"
	"sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	coresetup "sigs.k8s.io/cluster-api/core/setup"
	"sigs.k8s.io/cluster-api/util/index"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// setupClusterAPI registers Cluster API's own controllers, as its three
// provider binaries (core, kubeadm bootstrap, kubeadm control plane) set
// them up, in winkube's manager: the core's MachinePool controller as its
// MachinePool feature gate (on by default since v1.7) does, and its
// MachineHealthCheck controller. tokenTTL is the lifetime of the
// bootstrap tokens the kubeadm bootstrap controller makes (its
// --bootstrap-token-ttl, 15 minutes by default); it refreshes a token at
// a third of it and rotates a MachinePool's at half (kubeadmconfig's
// token.go, v1.14.2).
func setupClusterAPI(ctx context.Context, mgr ctrl.Manager, tokenTTL time.Duration) error {
	if tokenTTL == 0 {
		tokenTTL = kubeadmconfig.DefaultTokenTTL
	}
	opts := func(n int) controller.Options {
		// Names are not checked for uniqueness: a process may start a world
		// again after stopping one (tests, resuming).
		return controller.Options{MaxConcurrentReconciles: n, UsePriorityQueue: ptr.To(false), ReconciliationTimeout: 3 * time.Minute, SkipNameValidation: ptr.To(true)}
	}
	// The field indexes Cluster API's controllers look objects up by
	// (a Machine by its node's provider ID, ...), as its main registers.
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return fmt.Errorf("cluster API indexes: %w", err)
	}
	secrets, err := coresetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return err
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secrets,
		Cache:        coresetup.ClusterCacheCacheOptions(),
		// Every request Cluster API's controllers make to a workload
		// cluster (bootstrap tokens for each joining worker, each node's
		// labels and annotations) shares this client's rate: Cluster
		// API's default of 20 per second with bursts of 30 held the
		// workers of a large cluster in a queue.
		Client: coresetup.ClusterCacheClientOptions("winkube", 200, 400),
	}, opts(4))
	if err != nil {
		return fmt.Errorf("cluster cache: %w", err)
	}
	// The cluster cache first tries to reach a workload cluster as soon as
	// its infrastructure is provisioned, before the first control plane's
	// API server runs, and after a failure waits 30 s (Cluster API's
	// default, sized for clouds where a control plane takes minutes) before
	// the next try: in the local world that wait was half of a small
	// cluster's bring-up. Every controller that needs the workload cluster
	// (the control plane's initialization, the CNI's ClusterResourceSet,
	// the workers' join) waited for it. A try lasts up to its 5 s health
	// probe timeout (client-go retries the load balancer's reset each
	// second within it); between two tries nothing looks, so the wait is
	// one second, not more: a new API server the probe admits in that gap
	// is reached within a second.
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(time.Second)
	}
	// The ClusterResourceSet controller watches Secrets by metadata only,
	// from a cache of its own.
	partial, err := ctrlcache.New(mgr.GetConfig(), ctrlcache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		DefaultTransform: ctrlcache.TransformStripManagedFields(),
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(partial); err != nil {
		return err
	}
	steps := []struct {
		name  string
		setup func() error
	}{
		{"Cluster", func() error {
			return (&cluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc, RemoteConnectionGracePeriod: 50 * time.Second}).SetupWithManager(ctx, mgr, opts(4))
		}},
		{"Machine", func() error {
			return (&machine.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc, RemoteConditionsGracePeriod: 5 * time.Minute}).SetupWithManager(ctx, mgr, opts(8))
		}},
		{"MachineSet", func() error {
			return (&machineset.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts(4))
		}},
		{"MachineDeployment", func() error {
			return (&machinedeployment.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(ctx, mgr, opts(4))
		}},
		{"MachinePool", func() error {
			return (&machinepool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts(4))
		}},
		{"MachineHealthCheck", func() error {
			return (&machinehealthcheck.Reconciler{Client: mgr.GetClient(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts(4))
		}},
		{"ClusterResourceSet", func() error {
			return (&clusterresourceset.Reconciler{Client: mgr.GetClient(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts(2), partial)
		}},
		{"ClusterResourceSetBinding", func() error {
			return (&clusterresourcesetbinding.Reconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr, opts(2))
		}},
		{"KubeadmConfig", func() error {
			return (&kubeadmconfig.Reconciler{Client: mgr.GetClient(), SecretCachingClient: secrets, APIReader: mgr.GetAPIReader(), ClusterCache: cc, TokenTTL: tokenTTL}).SetupWithManager(ctx, mgr, opts(8))
		}},
		{"KubeadmControlPlane", func() error {
			return (&kubeadmcontrolplane.Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), SecretCachingClient: secrets, ClusterCache: cc,
				EtcdDialTimeout: 10 * time.Second, EtcdCallTimeout: 15 * time.Second, EtcdLogger: zap.NewNop(), RemoteConditionsGracePeriod: 5 * time.Minute,
			}).SetupWithManager(ctx, mgr, opts(2))
		}},
	}
	for _, s := range steps {
		if err := s.setup(); err != nil {
			return fmt.Errorf("cluster API %s controller: %w", s.name, err)
		}
	}
	return nil
}
