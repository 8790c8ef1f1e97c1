// Package startneeds holds what real Kubernetes system components need
// before their process can start, as data: one entry per upstream component,
// identified by its image repository, each need naming the upstream source it
// comes from, as kwok keeps simulated behaviour in Stages. The simulated
// kubelet asks the Checker when a container starts; a container whose
// component lacks something fails as the real process would, with the error
// that process logs. Adding a component means adding an entry, not code.
//
// The data describes upstream projects (Calico, flannel, cloud-provider-azure,
// sig-windows-tools, csi-proxy, the Azure Disk CSI driver and its Helm
// chart), never a particular cluster template.
package startneeds

import (
	"strings"

	"github.com/winkube/winkube/emulator/registry"
)

// Need is one thing a component needs to start. Exactly one of its fields
// other than Source and Log is set.
type Need struct {
	// Mount: the container mounts MountPath from a hostPath volume of
	// HostPath ("" for any volume).
	Mount *Mount `json:"mount,omitempty"`
	// HostNetwork: the pod runs in the host's network namespace.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// HostProcess: the Windows pod runs as a HostProcess pod.
	HostProcess bool `json:"hostProcess,omitempty"`
	// Env: the container sets this variable (directly, from a field or a
	// ConfigMap); EnvValue, when set, is the value it must have.
	Env      string `json:"env,omitempty"`
	EnvValue string `json:"envValue,omitempty"`
	// Arg: the container's command line carries this flag (with its value
	// when it has one).
	Arg string `json:"arg,omitempty"`
	// Permission: the pod's ServiceAccount may do this, asked of the API
	// server with a SubjectAccessReview.
	Permission *Permission `json:"permission,omitempty"`
	// CRD: the API serves this resource (plural.group), as a component
	// listing it needs.
	CRD string `json:"crd,omitempty"`
	// ConfigMap: the component reads these keys of this ConfigMap (in the
	// pod's namespace when Namespace is empty).
	ConfigMap *ConfigMap `json:"configMap,omitempty"`
	// CloudConfig: the node has an Azure cloud provider config file with
	// these fields.
	CloudConfig *CloudConfig `json:"cloudConfig,omitempty"`

	// IfArg, when set, makes the need conditional: it holds only when the
	// container's command line carries this flag ("--flag=value" for a
	// value), for a need a flag turns on against the program's default.
	IfArg string `json:"ifArg,omitempty"`

	// Source is where the fact comes from upstream.
	Source string `json:"source"`
	// Log is what the component logs when the need is not met; %s is
	// replaced by the detail (the missing path, field, resource...).
	Log string `json:"log"`
}

// Mount is a volume mount a component needs.
type Mount struct {
	MountPath string `json:"mountPath"`
	HostPath  string `json:"hostPath,omitempty"`
}

// Permission is one API access a component makes.
type Permission struct {
	Verb        string `json:"verb"`
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	// Namespace "" is cluster scope; "$pod" is the pod's own namespace.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// ConfigMap is a ConfigMap a component reads.
type ConfigMap struct {
	Namespace string   `json:"namespace,omitempty"`
	Name      string   `json:"name"`
	Keys      []string `json:"keys,omitempty"`
}

// CloudConfig is the Azure cloud provider's config file (azure.json).
type CloudConfig struct {
	// PathArg is the flag naming the file; Default is used when the
	// container does not pass it.
	PathArg string `json:"pathArg,omitempty"`
	Default string `json:"default"`
	// Fields must be present and non-empty.
	Fields []string `json:"fields"`
	// Credentials: either aadClientId and aadClientSecret, or
	// useManagedIdentityExtension true.
	Credentials bool `json:"credentials,omitempty"`
	// Secret, when set, is read first: a Secret holding the config
	// under a key; the file is read only when it is not there.
	Secret *CloudConfigSecret `json:"secret,omitempty"`
	// PathEnv is an environment variable that names the file when set and
	// not empty, before Default.
	PathEnv string `json:"pathEnv,omitempty"`
	// HostDir: the file is the node's, under this directory, which the
	// container sees only through a hostPath volume of it mounted at the
	// same path.
	HostDir string `json:"hostDir,omitempty"`
}

// CloudConfigSecret is a Secret a component reads its cloud config from:
// the flags naming it, their defaults, and the key.
type CloudConfigSecret struct {
	NameArg      string `json:"nameArg,omitempty"`
	NamespaceArg string `json:"namespaceArg,omitempty"`
	Name         string `json:"name"`
	Namespace    string `json:"namespace"`
	Key          string `json:"key"`
}

// Component is one upstream system component.
type Component struct {
	Name string `json:"name"`
	// Images are the image repositories the component ships as
	// (canonical, without tag: docker.io/calico/node).
	Images []string `json:"images"`
	// Containers, when set, are the upstream container names the entry
	// applies to, for images that run as more than one component
	// (flannel's image is both kube-flannel and its install-cni).
	Containers []string `json:"containers,omitempty"`
	// WithArgs and WithoutArgs, when set, narrow the entry to containers
	// whose command line carries (or lacks) these flags, for a program
	// whose role its flags decide (the Azure Disk CSI driver is its
	// controller without --nodeid and a node plugin with it).
	WithArgs    []string `json:"withArgs,omitempty"`
	WithoutArgs []string `json:"withoutArgs,omitempty"`
	// OS is "linux" or "windows"; "" for both.
	OS string `json:"os,omitempty"`
	// Effect is what the running component does that the simulation
	// carries out for it (EffectInitializesNode, EffectCloudController).
	Effect string `json:"effect,omitempty"`
	Source string `json:"source"`
	Needs  []Need `json:"needs"`

	// Watches are what the running component lists and watches with its
	// pod's credentials (its ServiceAccount's token), from its source at
	// the version the local world runs; Sync how it treats their errors.
	// Until every required one is listed the component does not act:
	// Effect does not happen, and an exec probe naming SyncProbe fails.
	Watches     []Watch `json:"watches,omitempty"`
	WatchSource string  `json:"watchSource,omitempty"`
	Sync        Sync    `json:"sync,omitzero"`
	SyncProbe   string  `json:"syncProbe,omitempty"`
	// Client is the rate limit the component's own client sets (zero:
	// client-go's defaults).
	Client ClientLimits `json:"client,omitzero"`

	// Syncers, for a fan-out server (Typha), are its pipelines: each lists
	// and watches its kinds with the pod's credentials and serves what it
	// holds to the server's clients. The runtime starts them with the
	// program, not as the component's Watches.
	Syncers []Syncer `json:"syncers,omitempty"`
	// Typha, when set, says how the component finds a Typha to take its
	// syncer's updates from instead of listing and watching them itself.
	Typha *TyphaClient `json:"typha,omitempty"`
}

// TyphaClient is how Felix finds Typha: the Endpoints of a Service named
// by ServiceEnv (unset, empty or "none": no Typha, Felix lists and
// watches itself) in the namespace NamespaceEnv names (DefaultNamespace
// when unset), their ready addresses' port named PortName.
type TyphaClient struct {
	ServiceEnv       string `json:"serviceEnv"`
	NamespaceEnv     string `json:"namespaceEnv"`
	DefaultNamespace string `json:"defaultNamespace"`
	PortName         string `json:"portName"`
	Source           string `json:"source"`
}

// Service is the Typha Service env names ("" when Felix runs without
// Typha). "none" is the zero value by Felix's config rule.
func (t *TyphaClient) Service(env map[string]string) string {
	if t == nil {
		return ""
	}
	v := env[t.ServiceEnv]
	if strings.EqualFold(v, "none") {
		return ""
	}
	return v
}

// Namespace is where the Typha Service is looked up.
func (t *TyphaClient) Namespace(env map[string]string) string {
	if v := env[t.NamespaceEnv]; v != "" {
		return v
	}
	return t.DefaultNamespace
}

// felixTypha is Felix's Typha discovery: FELIX_TYPHAK8SSERVICENAME (no
// default), FELIX_TYPHAK8SNAMESPACE (default kube-system), "none" the
// zero value (felix/config/config_params.go), and the port named
// calico-typha of the Endpoints' ready addresses
// (typha/pkg/discovery/discovery.go), v3.30.7 (74485ea4).
var felixTypha = &TyphaClient{
	ServiceEnv: "FELIX_TYPHAK8SSERVICENAME", NamespaceEnv: "FELIX_TYPHAK8SNAMESPACE", DefaultNamespace: "kube-system", PortName: "calico-typha",
	Source: "projectcalico/calico felix/config/config_params.go, typha/pkg/discovery/discovery.go (v3.30.7, 74485ea4)",
}

// Effects of running components.
const (
	// EffectInitializesNode: the node's provider ID, cloud labels and
	// addresses are set from the instance metadata and the uninitialized
	// taint removed (cloud-provider-azure's node manager).
	EffectInitializesNode = "initializes-node"
	// EffectCloudController: the cloud's service and node lifecycle
	// controllers run (cloud-provider-azure's controller manager).
	EffectCloudController = "cloud-controller"
	// EffectPodRoutes: the node's routes to other nodes' pods (VXLAN
	// routes, HNS remote-subnet policies) are programmed (Felix).
	EffectPodRoutes = "pod-routes"
	// EffectServiceRules: the node's Service rules are programmed
	// (kube-proxy).
	EffectServiceRules = "service-rules"
	// EffectPodNetwork: the node's routes to other nodes' pods follow the
	// backend of the network configuration the agent reads as it starts
	// (flanneld's net-conf.json): host-gw sends pod packets unencapsulated
	// to the VNet, which then needs a route for them.
	EffectPodNetwork = "pod-network"
	// EffectTyphaServer: the pod serves Typha's syncers on its host
	// address (5473), with its health on 9098.
	EffectTyphaServer = "typha-server"
)

// Upstream sources.
const (
	calicoManifest     = "projectcalico/calico manifests/calico.yaml (v3.28)"
	calicoWindows      = "tigera/operator pkg/render/windows.go (v1.38.16, Calico v3.30.7)"
	calicoCRDs         = "projectcalico/calico manifests/crds.yaml (v3.28), libcalico-go/lib/backend/k8s"
	flannelManifest    = "flannel-io/flannel Documentation/kube-flannel.yml (v0.25)"
	flannelSubnetMgr   = "flannel-io/flannel pkg/subnet/kube/kube.go"
	sigWindowsProxy    = "kubernetes-sigs/cluster-api-provider-azure templates/addons/windows/calico/kube-proxy-windows.yaml (69ec3a40)"
	kubeadmProxyRBAC   = "kubernetes/kubernetes cmd/kubeadm/app/phases/addons/proxy (system:node-proxier)"
	ccmChart           = "kubernetes-sigs/cloud-provider-azure helm/cloud-provider-azure/templates/cloud-provider-azure.yaml"
	ccmConfig          = "kubernetes-sigs/cloud-provider-azure pkg/provider/config/azure.go (Config), docs cloud-provider-config"
	cloudProviderApp   = "kubernetes/cloud-provider app/controllermanager.go"
	kubeForbidden      = `%s` // the API server's Forbidden message, as the component prints it
	crdMissing         = "the server could not find the requested resource (%s)"
	calicoEtcdFallback = "DATASTORE_TYPE %s: calico defaults to the etcdv3 datastore at http://127.0.0.1:2379 and fails: context deadline exceeded"

	// The Azure Disk CSI driver: its Helm chart 1.34.5's templates (read
	// at d983d613) and the driver at v1.34.5 (fb4981e3).
	azureDiskChart          = "kubernetes-sigs/azuredisk-csi-driver charts/v1.34.5/azuredisk-csi-driver/templates/"
	azureDiskController     = azureDiskChart + "csi-azuredisk-controller.yaml (d983d613)"
	azureDiskControllerRBAC = azureDiskChart + "rbac-csi-azuredisk-controller.yaml (d983d613)"
	azureDiskNode           = azureDiskChart + "csi-azuredisk-node.yaml (d983d613)"
	azureDiskNodeWindows    = azureDiskChart + "csi-azuredisk-node-windows-hostprocess.yaml (d983d613)"
	azureDiskNodeRBAC       = azureDiskChart + "rbac-csi-azuredisk-node.yaml (d983d613)"
	azureDiskCloudConfig    = "kubernetes-sigs/azuredisk-csi-driver pkg/azureutils/azure_disk_utils.go GetCloudProviderFromClient, pkg/azuredisk/azuredisk.go Run (v1.34.5, fb4981e3)"
	azureDiskListen         = "kubernetes-sigs/azuredisk-csi-driver pkg/csi-common/utils.go Listen, pkg/azuredisk/azuredisk.go Run (v1.34.5, fb4981e3)"
	azureDiskHPMounter      = "kubernetes-sigs/azuredisk-csi-driver pkg/mounter/safe_mounter_windows.go NewSafeMounter, safe_mounter_host_process_windows.go (v1.34.5, fb4981e3)"
	azureDiskLog            = "failed to get Azure Cloud Provider, error: no cloud config provided, error: %s"
	externalProvisioner     = "kubernetes-csi/external-provisioner deploy/kubernetes/rbac.yaml (v6.3.0, 34c6fc21)"
	externalAttacher        = "kubernetes-csi/external-attacher deploy/kubernetes/rbac.yaml (v4.12.0, f395fb4f)"
	externalResizer         = "kubernetes-csi/external-resizer deploy/kubernetes/rbac.yaml (v2.2.0, 314a8de6)"
	nodeDriverRegistrar     = "kubernetes-csi/node-driver-registrar cmd/csi-node-driver-registrar/node_register.go (v2.17.0, c5794c45)"

	calicoTyphaYAML = "projectcalico/calico manifests/calico-typha.yaml (v3.30.7, 74485ea4)"
	// Typha's DatastoreType defaults to etcdv3 (typha/pkg/config/
	// config_params.go, v3.30.7), as calico-node's does.
	typhaEtcdFallback = "TYPHA_DATASTORETYPE %s: Typha defaults to the etcdv3 datastore at http://127.0.0.1:2379 and fails: context deadline exceeded"
)

// The Azure Disk CSI images' repositories, from the registry's pins.
var (
	azureDiskRepo              = registry.AzureDiskRepository
	csiProvisionerRepo         = registry.Repository(registry.CSIProvisionerImage)
	csiAttacherRepo            = registry.Repository(registry.CSIAttacherImage)
	csiResizerRepo             = registry.Repository(registry.CSIResizerImage)
	csiNodeDriverRegistrarRepo = registry.Repository(registry.CSINodeDriverRegistrarImage)
)

// Azure cloud provider config fields every cloud-controller-manager needs
// to reach its VMs, load balancers and network.
var azureJSONFields = []string{"cloud", "tenantId", "subscriptionId", "resourceGroup", "location", "vmType",
	"vnetName", "vnetResourceGroup", "subnetName", "securityGroupName", "securityGroupResourceGroup", "routeTableName", "loadBalancerSku"}

func mount(path, host, source, log string) Need {
	return Need{Mount: &Mount{MountPath: path, HostPath: host}, Source: source, Log: log}
}

func perm(verb, group, resource, source string) Need {
	sub := ""
	for i := range resource {
		if resource[i] == '/' {
			resource, sub = resource[:i], resource[i+1:]
			break
		}
	}
	return Need{Permission: &Permission{Verb: verb, Group: group, Resource: resource, Subresource: sub}, Source: source, Log: kubeForbidden}
}

// leasePerms are what a sidecar's leader election does with its Lease
// in its own namespace (--leader-election-namespace, the pod's here).
func leasePerms(source string) []Need {
	var out []Need
	for _, verb := range []string{"get", "create", "update"} {
		out = append(out, Need{Permission: &Permission{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: "$pod"}, Source: source, Log: kubeForbidden})
	}
	return out
}

// azureDiskNodePerms is what the driver's node plugin does with the
// node role (nodes get and patch for its agent-not-ready taint, its
// CSINode, the VolumeAttachments of its node).
func azureDiskNodePerms() []Need {
	return []Need{
		perm("get", "", "nodes", azureDiskNodeRBAC), perm("get", "storage.k8s.io", "csinodes", azureDiskNodeRBAC),
		perm("get", "storage.k8s.io", "volumeattachments", azureDiskNodeRBAC), perm("list", "storage.k8s.io", "volumeattachments", azureDiskNodeRBAC),
	}
}

func crds(source string, names ...string) []Need {
	out := make([]Need, 0, len(names))
	for _, n := range names {
		out = append(out, Need{CRD: n + ".crd.projectcalico.org", Source: source, Log: crdMissing})
	}
	return out
}

func cat(parts ...[]Need) []Need {
	var out []Need
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// calicoNodePerms is what calico-node (Linux and Windows) does with its
// ServiceAccount in Kubernetes-datastore mode.
func calicoNodePerms(source string) []Need {
	return []Need{
		perm("get", "", "nodes", source), perm("patch", "", "nodes/status", source),
		perm("list", "", "pods", source), perm("list", "", "namespaces", source),
		perm("list", "", "services", source), perm("list", "discovery.k8s.io", "endpointslices", source),
		perm("get", "crd.projectcalico.org", "clusterinformations", source), perm("create", "crd.projectcalico.org", "clusterinformations", source),
		perm("list", "crd.projectcalico.org", "felixconfigurations", source), perm("list", "crd.projectcalico.org", "ippools", source),
		perm("create", "crd.projectcalico.org", "ipamblocks", source), perm("create", "crd.projectcalico.org", "blockaffinities", source),
		perm("create", "crd.projectcalico.org", "ipamhandles", source), perm("list", "crd.projectcalico.org", "globalnetworkpolicies", source),
	}
}

// calicoFelixCRDs are the kinds calico-node's startup and Felix's syncer
// read in Kubernetes-datastore mode.
var calicoFelixCRDs = []string{"clusterinformations", "felixconfigurations", "ippools", "ipamblocks", "blockaffinities", "ipamhandles",
	"ipamconfigs", "bgpconfigurations", "globalnetworkpolicies", "networkpolicies", "globalnetworksets", "networksets", "hostendpoints", "caliconodestatuses", "ipreservations"}

// Catalog is every component the simulation knows.
func Catalog() []Component {
	return []Component{
		{
			Name: "calico-node", Images: []string{"docker.io/calico/node"}, OS: "linux", Source: calicoManifest,
			Needs: cat([]Need{
				{HostNetwork: true, Source: calicoManifest, Log: "calico-node must run in the host network: %s"},
				{Env: "DATASTORE_TYPE", EnvValue: "kubernetes", Source: calicoManifest, Log: calicoEtcdFallback},
				{Env: "NODENAME", Source: calicoManifest, Log: "Unable to determine the node name: %s"},
				{Env: "CALICO_NETWORKING_BACKEND", Source: calicoManifest, Log: "calico-node: %s"},
				mount("/lib/modules", "/lib/modules", calicoManifest, "Failed to load kernel modules: %s"),
				mount("/run/xtables.lock", "/run/xtables.lock", calicoManifest, "Felix: iptables lock: %s"),
				mount("/var/run/calico", "/var/run/calico", calicoManifest, "Failed to write the node's status: %s"),
				mount("/var/lib/calico", "/var/lib/calico", calicoManifest, "Unable to write the node name file: %s"),
				mount("/host/etc/cni/net.d", "/etc/cni/net.d", calicoManifest, "Failed to read the CNI configuration: %s"),
			}, calicoNodePerms(calicoManifest), crds(calicoCRDs, calicoFelixCRDs...)),
			Effect: EffectPodRoutes, Watches: felixWatches, WatchSource: felixSyncer, Sync: felixSync, SyncProbe: "-felix-ready", Client: calicoClient, Typha: felixTypha,
		},
		{
			Name: "calico-typha", Images: []string{"docker.io/calico/typha"}, OS: "linux", Source: calicoTyphaYAML,
			// What it may list is not a start need: Typha starts whatever
			// its rights, and each refused list is retried every second
			// with its cache (and readiness) held back (the watcher
			// cache, felixSync); the runtime's sessions make those lists
			// with the pod's token. Its rebalancing GETs the Service's
			// Endpoints and only logs a refusal.
			Needs: []Need{
				{HostNetwork: true, Source: calicoTyphaYAML, Log: "calico-typha must run in the host network: %s"},
				{Env: "TYPHA_DATASTORETYPE", EnvValue: "kubernetes", Source: calicoTyphaYAML, Log: typhaEtcdFallback},
			},
			Effect: EffectTyphaServer, Syncers: typhaSyncers, WatchSource: typhaSyncersSrc, Sync: felixSync, Client: calicoClient,
		},
		{
			Name: "calico install-cni", Images: []string{"docker.io/calico/cni"}, OS: "linux", Source: calicoManifest,
			Needs: []Need{
				{Env: "CNI_NETWORK_CONFIG", Source: calicoManifest, Log: "Failed to install the CNI configuration: %s"},
				{ConfigMap: &ConfigMap{Name: "calico-config", Keys: []string{"cni_network_config", "veth_mtu"}}, Source: calicoManifest, Log: "install-cni: %s"},
				mount("/host/opt/cni/bin", "/opt/cni/bin", calicoManifest, "Failed to install the CNI binaries: %s"),
				mount("/host/etc/cni/net.d", "/etc/cni/net.d", calicoManifest, "Failed to install the CNI configuration: %s"),
				// install-cni writes the CNI plugin's kubeconfig with a
				// token of the calico-cni-plugin ServiceAccount.
				{Permission: &Permission{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "$pod", Name: "calico-cni-plugin"}, Source: calicoManifest, Log: kubeForbidden},
			},
		},
		{
			Name: "calico-kube-controllers", Images: []string{"docker.io/calico/kube-controllers"}, OS: "linux", Source: calicoManifest,
			Needs: cat([]Need{
				{Env: "DATASTORE_TYPE", EnvValue: "kubernetes", Source: calicoManifest, Log: calicoEtcdFallback},
				{Env: "ENABLED_CONTROLLERS", Source: calicoManifest, Log: "kube-controllers: %s"},
				perm("watch", "", "nodes", calicoManifest), perm("list", "", "pods", calicoManifest),
				perm("list", "crd.projectcalico.org", "ipamblocks", calicoManifest), perm("delete", "crd.projectcalico.org", "ipamhandles", calicoManifest),
				perm("update", "crd.projectcalico.org", "blockaffinities", calicoManifest), perm("list", "crd.projectcalico.org", "ippools", calicoManifest),
				perm("create", "crd.projectcalico.org", "kubecontrollersconfigurations", calicoManifest), perm("update", "crd.projectcalico.org", "clusterinformations", calicoManifest),
				perm("list", "crd.projectcalico.org", "hostendpoints", calicoManifest),
			}, crds(calicoCRDs, "kubecontrollersconfigurations", "clusterinformations", "ipamblocks", "blockaffinities", "ipamhandles", "ippools", "hostendpoints", "ipreservations")),
			Watches: kubeControllersWatches, WatchSource: kubeControllersSrc, Sync: informerSync, SyncProbe: "-r",
		},
		{
			// How its processes start, and what they need of the node,
			// is emulator/machines/containerruntime's: only what they ask of the
			// API server is here.
			Name: "calico-node-windows", Images: []string{"docker.io/calico/node-windows", "docker.io/calico/cni-windows"}, OS: "windows", Source: calicoWindows,
			Needs:  cat(calicoNodePerms(calicoWindows), crds(calicoCRDs, calicoFelixCRDs...)),
			Effect: EffectPodRoutes, Watches: felixWatches, WatchSource: felixSyncer, Sync: felixSync, SyncProbe: "-felix-ready", Client: calicoClient, Typha: felixTypha,
		},
		{
			Name: "kube-flannel", Images: []string{"docker.io/flannel/flannel"}, Containers: []string{"kube-flannel"}, OS: "linux", Source: flannelManifest,
			Needs: []Need{
				{HostNetwork: true, Source: flannelManifest, Log: "flanneld must run in the host network: %s"},
				{Env: "POD_NAME", Source: flannelSubnetMgr, Log: "Failed to create SubnetManager: error retrieving pod spec: %s"},
				{Env: "POD_NAMESPACE", Source: flannelSubnetMgr, Log: "Failed to create SubnetManager: error retrieving pod spec: %s"},
				{ConfigMap: &ConfigMap{Name: "kube-flannel-cfg", Keys: []string{"net-conf.json"}}, Source: flannelManifest, Log: "failed to read net conf: %s"},
				mount("/etc/kube-flannel/", "", flannelManifest, "Failed to create SubnetManager: failed to read net conf: %s"),
				mount("/run/flannel", "/run/flannel", flannelManifest, "Failed to write subnet file: %s"),
				mount("/run/xtables.lock", "/run/xtables.lock", flannelManifest, "Failed to set up IP masquerade: %s"),
				perm("get", "", "pods", flannelManifest), perm("list", "", "nodes", flannelManifest),
				perm("watch", "", "nodes", flannelManifest), perm("patch", "", "nodes/status", flannelManifest),
			},
			Effect: EffectPodNetwork,
		},
		{
			Name: "flannel install-cni", Images: []string{"docker.io/flannel/flannel"}, Containers: []string{"install-cni"}, OS: "linux", Source: flannelManifest,
			Needs: []Need{
				mount("/etc/cni/net.d", "/etc/cni/net.d", flannelManifest, "cp: can't create '/etc/cni/net.d/10-flannel.conflist': %s"),
				mount("/etc/kube-flannel/", "", flannelManifest, "cp: can't stat '/etc/kube-flannel/cni-conf.json': %s"),
			},
		},
		{
			Name: "flannel install-cni-plugin", Images: []string{"docker.io/flannel/flannel-cni-plugin"}, OS: "linux", Source: flannelManifest,
			Needs: []Need{mount("/opt/cni/bin", "/opt/cni/bin", flannelManifest, "cp: can't create '/opt/cni/bin/flannel': %s")},
		},
		{
			Name: "kube-proxy (Windows)", Images: []string{"docker.io/sigwindowstools/kube-proxy"}, OS: "windows", Source: sigWindowsProxy,
			Needs: []Need{
				perm("list", "", "services", kubeadmProxyRBAC), perm("watch", "", "services", kubeadmProxyRBAC),
				perm("list", "discovery.k8s.io", "endpointslices", kubeadmProxyRBAC), perm("get", "", "nodes", kubeadmProxyRBAC),
			},
			Effect: EffectServiceRules, Watches: kubeProxyWatches, WatchSource: kubeProxySrc, Sync: informerSync,
		},
		{
			// kubeadm's kube-proxy DaemonSet: its kubeconfig (the
			// kube-proxy ConfigMap) names the pod's ServiceAccount token.
			Name: "kube-proxy", Images: []string{"registry.k8s.io/kube-proxy"}, OS: "linux", Source: kubeadmProxyRBAC,
			Needs:  []Need{perm("get", "", "nodes", kubeadmProxyRBAC)},
			Effect: EffectServiceRules, Watches: kubeProxyWatches, WatchSource: kubeProxySrc, Sync: informerSync,
		},
		{
			Name: "cloud-controller-manager", OS: "linux", Source: ccmChart, Effect: EffectCloudController,
			Images: []string{"mcr.microsoft.com/oss/kubernetes/azure-cloud-controller-manager", "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager"},
			Needs: []Need{
				{Arg: "--cloud-provider=azure", Source: cloudProviderApp, Log: "--cloud-provider cannot be empty: %s"},
				mount("/etc/kubernetes", "/etc/kubernetes", ccmChart, "Cloud provider could not be initialized: could not init cloud provider \"azure\": %s"),
				mount("/etc/ssl", "/etc/ssl", ccmChart, "failed to load system roots: %s"),
				{CloudConfig: &CloudConfig{PathArg: "--cloud-config", Default: "/etc/kubernetes/azure.json", Fields: azureJSONFields, Credentials: true},
					Source: ccmConfig, Log: "Cloud provider could not be initialized: could not init cloud provider \"azure\": %s"},
				perm("create", "", "events", ccmChart), perm("update", "", "nodes", ccmChart), perm("patch", "", "nodes/status", ccmChart),
				perm("list", "", "services", ccmChart), perm("patch", "", "services/status", ccmChart),
				perm("get", "coordination.k8s.io", "leases", ccmChart), perm("create", "coordination.k8s.io", "leases", ccmChart), perm("update", "coordination.k8s.io", "leases", ccmChart),
				perm("list", "discovery.k8s.io", "endpointslices", ccmChart),
			},
			Watches: ccmWatches, WatchSource: ccmSrc, Sync: informerSync,
		},
		{
			Name: "cloud-node-manager", OS: "linux", Source: ccmChart, Effect: EffectInitializesNode,
			Images: []string{"mcr.microsoft.com/oss/kubernetes/azure-cloud-node-manager", "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager"},
			Needs: []Need{
				{HostNetwork: true, Source: ccmChart + " (hostNetwork: required to fetch correct hostname)", Log: "cloud-node-manager: %s"},
				{Env: "NODE_NAME", Source: ccmChart, Log: "cloud-node-manager: --node-name is empty: %s"},
				perm("get", "", "nodes", ccmChart), perm("update", "", "nodes", ccmChart), perm("patch", "", "nodes", ccmChart), perm("patch", "", "nodes/status", ccmChart),
			},
			Watches: nodeManagerWatches, WatchSource: nodeManagerSrc, Sync: informerSync,
		},
		{
			// One program is the controller and the node plugins: without
			// --nodeid it serves the controller (it attaches disks to VMs,
			// so it must have a cloud config), with it a node's disks.
			// (pkg/azuredisk/azuredisk.go Run, v1.34.5: "nodeid is not
			// needed in controller component").
			Name: "azuredisk-csi controller", Images: []string{azureDiskRepo}, WithoutArgs: []string{"--nodeid"}, OS: "linux", Source: azureDiskController,
			Needs: []Need{
				// The chart passes --allow-empty-cloud-config=false (the
				// flag's default is true): the driver then reads the
				// Secret kube-system/azure-cloud-provider key
				// cloud-config, else $AZURE_CREDENTIAL_FILE or
				// /etc/kubernetes/azure.json through the azure-cred
				// hostPath volume, and exits without either. Any config
				// it can parse will do: a failing cloud initialisation
				// is only a warning.
				{CloudConfig: &CloudConfig{
					Secret:  &CloudConfigSecret{NameArg: "--cloud-config-secret-name", NamespaceArg: "--cloud-config-secret-namespace", Name: "azure-cloud-provider", Namespace: "kube-system", Key: "cloud-config"},
					PathEnv: "AZURE_CREDENTIAL_FILE", Default: "/etc/kubernetes/azure.json", HostDir: "/etc/kubernetes", Fields: []string{},
				}, IfArg: "--allow-empty-cloud-config=false", Source: azureDiskCloudConfig + "; " + azureDiskController, Log: azureDiskLog},
				// --endpoint unix:///csi/csi.sock: the socket-dir emptyDir
				// the sidecars share.
				mount("/csi", "", azureDiskListen+"; "+azureDiskController, "failed to listen to endpoint, error: %s"),
				// --check-disk-lun-collision reads the node's other
				// VolumeAttachments' LUNs.
				perm("list", "storage.k8s.io", "volumeattachments", azureDiskControllerRBAC),
			},
		},
		{
			Name: "azuredisk-csi node", Images: []string{azureDiskRepo}, WithArgs: []string{"--nodeid"}, OS: "linux", Source: azureDiskNode,
			Needs: cat([]Need{
				mount("/csi", "/var/lib/kubelet/plugins/disk.csi.azure.com", azureDiskListen+"; "+azureDiskNode, "failed to listen to endpoint, error: %s"),
			}, azureDiskNodePerms()),
		},
		{
			// The HostProcess form CAPZ's clusters get (the chart's
			// windows.useHostProcessContainers): the driver's host
			// process mounter manages the host's disks and volumes itself
			// (CIM or PowerShell) and never dials csi-proxy.
			Name: "azuredisk-csi node (Windows)", Images: []string{azureDiskRepo}, WithArgs: []string{"--nodeid", "--enable-windows-host-process=true"}, OS: "windows", Source: azureDiskNodeWindows,
			Needs: cat([]Need{
				{HostProcess: true, Source: azureDiskNodeWindows + "; " + azureDiskHPMounter, Log: "azurediskplugin.exe --enable-windows-host-process=true manages the host's disks as a host process: %s"},
			}, azureDiskNodePerms()),
		},
		{
			// The controller pod's sidecars share its ServiceAccount,
			// which the chart binds to each sidecar's role: a sidecar's
			// call may be granted by another's role (the attacher reads
			// CSINodes by the provisioner's).
			Name: "csi-provisioner", Images: []string{csiProvisionerRepo}, OS: "linux", Source: externalProvisioner,
			Needs: cat([]Need{
				perm("create", "", "persistentvolumes", externalProvisioner), perm("update", "", "persistentvolumeclaims", externalProvisioner),
				perm("get", "storage.k8s.io", "storageclasses", externalProvisioner), perm("get", "storage.k8s.io", "csinodes", externalProvisioner),
				perm("get", "", "nodes", externalProvisioner),
			}, leasePerms(externalProvisioner)),
			Watches: provisionerWatches, WatchSource: provisionerSrc, Sync: informerSync,
		},
		{
			Name: "csi-attacher", Images: []string{csiAttacherRepo}, OS: "linux", Source: externalAttacher,
			Needs: cat([]Need{
				perm("patch", "storage.k8s.io", "volumeattachments", externalAttacher), perm("patch", "storage.k8s.io", "volumeattachments/status", externalAttacher),
				perm("get", "storage.k8s.io", "csinodes", externalAttacher), perm("patch", "", "persistentvolumes", externalAttacher),
			}, leasePerms(externalAttacher)),
			Watches: attacherWatches, WatchSource: attacherSrc, Sync: informerSync,
		},
		{
			Name: "csi-resizer", Images: []string{csiResizerRepo}, OS: "linux", Source: externalResizer,
			Needs: cat([]Need{
				perm("patch", "", "persistentvolumes", externalResizer), perm("patch", "", "persistentvolumeclaims/status", externalResizer),
				perm("list", "", "pods", externalResizer),
			}, leasePerms(externalResizer)),
		},
		{
			// Linux: the registration socket goes to the kubelet's
			// plugins_registry through the registration-dir volume. The
			// Windows HostProcess form writes to the host's directory
			// itself (--plugin-registration-path).
			Name: "csi-node-driver-registrar", Images: []string{csiNodeDriverRegistrarRepo}, OS: "linux", Source: azureDiskNode,
			Needs: []Need{
				mount("/registration", "/var/lib/kubelet/plugins_registry", nodeDriverRegistrar+"; "+azureDiskNode, `"Failed to listen on socket" err="%s"`),
			},
		},
		{
			Name: "cloud-node-manager (Windows)", OS: "windows", Source: ccmChart, Effect: EffectInitializesNode,
			Images: []string{"mcr.microsoft.com/oss/kubernetes/azure-cloud-node-manager", "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager"},
			Needs: []Need{
				perm("get", "", "nodes", ccmChart), perm("update", "", "nodes", ccmChart), perm("patch", "", "nodes", ccmChart), perm("patch", "", "nodes/status", ccmChart),
			},
			Watches: nodeManagerWatches, WatchSource: nodeManagerSrc, Sync: informerSync,
		},
	}
}
