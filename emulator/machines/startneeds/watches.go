package startneeds

import "time"

// What each component lists and watches, read from its source at the
// version the local world runs (never copied):
const (
	// projectcalico/calico v3.30.7 (74485ea4):
	// libcalico-go/lib/backend/syncersv1/felixsyncer/felixsyncerv1.go
	// (the kinds, Kubernetes datastore, Felix the leader, Calico IPAM),
	// and the Kubernetes resource behind each kind in
	// libcalico-go/lib/backend/k8s/k8s.go and resources/ (Profile is
	// namespaces and serviceaccounts, WorkloadEndpoint pods, Node nodes,
	// Block ipamblocks).
	felixSyncer = "projectcalico/calico libcalico-go/lib/backend/syncersv1/felixsyncer/felixsyncerv1.go (v3.30.7, 74485ea4)"
	// kube-controllers/cmd/kube-controllers/main.go (pod and node
	// informers), kube-controllers/pkg/controllers/utils/syncer.go (node
	// controller's syncer), kube-controllers/pkg/config/runconfig.go
	// (KubeControllersConfiguration), same commit.
	kubeControllersSrc = "projectcalico/calico kube-controllers/pkg/controllers/utils/syncer.go, cmd/kube-controllers/main.go, pkg/config/runconfig.go (v3.30.7, 74485ea4)"
	// kubernetes/kubernetes cmd/kube-proxy/app/server.go (002c85b2):
	// Services without service.kubernetes.io/service-proxy-name and not
	// headless, EndpointSlices without service.kubernetes.io/headless,
	// ServiceCIDRs (MultiCIDRServiceAllocator, GA), its own Node.
	kubeProxySrc = "kubernetes/kubernetes cmd/kube-proxy/app/server.go (002c85b2)"
	// kubernetes-sigs/cloud-provider-azure cmd/cloud-node-manager/app/
	// nodemanager.go (001e0a44) and options/options.go (0fca6fc2): one
	// shared Node informer, not narrowed to its node ("TODO filter watch
	// by node name").
	nodeManagerSrc = "kubernetes-sigs/cloud-provider-azure cmd/cloud-node-manager/app/options/options.go (0fca6fc2), nodemanager.go (001e0a44)"
	// kubernetes/cloud-provider controllers/service/controller.go and
	// controllers/nodelifecycle (Service and Node informers);
	// cloud-provider-azure's EndpointSlice informer serves only its
	// multiple-load-balancer mode.
	ccmSrc = "kubernetes/cloud-provider controllers/service/controller.go, controllers/nodelifecycle; kubernetes-sigs/cloud-provider-azure pkg/provider/azure.go"
	// kubernetes-csi/external-provisioner v6.3.0 (34c6fc21)
	// cmd/csi-provisioner/csi-provisioner.go: StorageClasses, claims,
	// VolumeAttachments (the driver publishes volumes), CSINodes and
	// Nodes (Topology=true), every informer of its factory waited for
	// before it runs; the vendored sig-storage-lib-external-provisioner
	// v13 controller/controller.go adds its own PV informer and waits for
	// it too.
	provisionerSrc = "kubernetes-csi/external-provisioner cmd/csi-provisioner/csi-provisioner.go, vendor/sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller/controller.go (v6.3.0, 34c6fc21)"
	// kubernetes-csi/external-attacher v4.12.0 (f395fb4f)
	// cmd/csi-attacher/main.go: VolumeAttachments and PVs (the controller
	// waits for both), CSINodes (the handler's node IDs).
	attacherSrc = "kubernetes-csi/external-attacher cmd/csi-attacher/main.go (v4.12.0, f395fb4f)"
	// projectcalico/calico v3.30.7 (74485ea4): typha/pkg/daemon/daemon.go
	// CreateServer builds one pipeline per syncer type (felix, bgp,
	// tunnel-ip-allocation, node-status), each its own watcher-syncer,
	// with node "" (every node) and the Felix syncer as leader; the kinds
	// of each are in libcalico-go/lib/backend/syncersv1/bgpsyncer/
	// bgpsyncer.go (Calico IPAM: block affinities too), tunnelipsyncer/
	// tunnelipsyncer.go and nodestatussyncer/nodestatussyncer.go.
	typhaSyncersSrc = "projectcalico/calico typha/pkg/daemon/daemon.go, libcalico-go/lib/backend/syncersv1/{felixsyncer,bgpsyncer,tunnelipsyncer,nodestatussyncer} (v3.30.7, 74485ea4)"
)

const calicoGroup = "crd.projectcalico.org"

func crdWatch(resource string) Watch {
	return Watch{Group: calicoGroup, Version: "v1", Resource: resource}
}

// felixWatches are Felix's syncer's lists. The kinds the rendered add-ons
// of the day may not install (Tier and the staged policies, and
// policy.networking.k8s.io's admin network policies) are listed only
// while served: see Watch.IfServed.
var felixWatches = []Watch{
	crdWatch("clusterinformations"), crdWatch("felixconfigurations"),
	crdWatch("globalnetworkpolicies"), {Group: calicoGroup, Version: "v1", Resource: "stagedglobalnetworkpolicies", IfServed: true},
	crdWatch("globalnetworksets"), crdWatch("ippools"),
	{Version: "v1", Resource: "nodes"},
	{Version: "v1", Resource: "namespaces"}, {Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "pods"},
	crdWatch("networkpolicies"), {Group: calicoGroup, Version: "v1", Resource: "stagednetworkpolicies", IfServed: true},
	{Group: calicoGroup, Version: "v1", Resource: "stagedkubernetesnetworkpolicies", IfServed: true},
	crdWatch("networksets"), {Group: calicoGroup, Version: "v1", Resource: "tiers", IfServed: true},
	crdWatch("hostendpoints"), crdWatch("bgpconfigurations"), crdWatch("bgppeers"),
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	{Group: "policy.networking.k8s.io", Version: "v1alpha1", Resource: "adminnetworkpolicies", IfServed: true},
	{Group: "policy.networking.k8s.io", Version: "v1alpha1", Resource: "baselineadminnetworkpolicies", IfServed: true},
	{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
	{Version: "v1", Resource: "services"},
	crdWatch("ipamblocks"),
}

// Syncer is one of Typha's pipelines: the syncer type its clients ask
// for and what its watcher-syncer lists and watches.
type Syncer struct {
	Type    string  `json:"type"`
	Watches []Watch `json:"watches"`
}

// typhaSyncers are Typha's four pipelines (typhaSyncersSrc). One Typha
// lists and watches nodes and IP pools three times over, as upstream's.
var typhaSyncers = []Syncer{
	{Type: "felix", Watches: felixWatches},
	{Type: "bgp", Watches: []Watch{crdWatch("ippools"), crdWatch("bgpconfigurations"), {Version: "v1", Resource: "nodes"},
		crdWatch("bgppeers"), crdWatch("bgpfilters"), crdWatch("blockaffinities")}},
	{Type: "tunnel-ip-allocation", Watches: []Watch{crdWatch("ippools"), {Version: "v1", Resource: "nodes"}}},
	{Type: "node-status", Watches: []Watch{crdWatch("caliconodestatuses")}},
}

// calicoClient is libcalico-go's Kubernetes client: client-go's QPS (5)
// unless configured, and a burst of 100 "so that the IPAM code performs
// efficiently" (projectcalico/calico libcalico-go/lib/backend/k8s/k8s.go,
// CreateKubernetesClientset, @0579e102). Felix's syncer starts with about
// 25 lists and as many watches: with client-go's burst of 10 the last of
// them waited seconds for a token, and Felix's readiness probe, which
// fails until every list is in, missed its tick by as much.
var calicoClient = ClientLimits{Burst: 100}

// felixSync is Calico's watcherCache: 404 is "not installed", in sync,
// tried again after MissingAPIRetryTime (30m); anything else is retried
// every ListRetryInterval (1s), forever.
var felixSync = Sync{NotFoundSynced: true, MissingRetry: 30 * time.Minute, Retry: time.Second, MaxRetry: time.Second}

// informerSync is client-go's reflector: every error is retried with its
// back-off (800ms doubling to 30s), and an informer never syncs
// without its first list.
var informerSync = Sync{Retry: 800 * time.Millisecond, MaxRetry: 30 * time.Second}

var kubeControllersWatches = []Watch{
	{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "nodes"},
	crdWatch("clusterinformations"), crdWatch("ipamblocks"), crdWatch("ippools"), crdWatch("hostendpoints"),
	crdWatch("kubecontrollersconfigurations"),
}

var kubeProxyWatches = []Watch{
	{Version: "v1", Resource: "services", LabelSelector: "!service.kubernetes.io/service-proxy-name", FieldSelector: "spec.clusterIP!=None"},
	{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices", LabelSelector: "!service.kubernetes.io/headless"},
	// The iptables and Windows kernelspace proxiers do not wait for it.
	{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs", Optional: true},
	{Version: "v1", Resource: "nodes", OwnNode: true},
}

var nodeManagerWatches = []Watch{{Version: "v1", Resource: "nodes"}}

var ccmWatches = []Watch{
	{Version: "v1", Resource: "services"}, {Version: "v1", Resource: "nodes"},
	{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices", Optional: true},
}

var provisionerWatches = []Watch{
	{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}, {Version: "v1", Resource: "persistentvolumeclaims"},
	{Version: "v1", Resource: "persistentvolumes"}, {Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"},
	{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes"}, {Version: "v1", Resource: "nodes"},
}

var attacherWatches = []Watch{
	{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"}, {Version: "v1", Resource: "persistentvolumes"},
	{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes"},
}
