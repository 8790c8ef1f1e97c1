package flavors

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
)

// The Azure cloud config, as Cluster API Provider Azure delivers it: a
// Secret per AzureMachineTemplate (or AzureMachinePool, or AzureMachine not
// made from a template) named <name>-azure-json, which the bootstrap config
// writes to the node.
const (
	AzureJSONSuffix         = "-azure-json"
	ControlPlaneAzureJSON   = "control-plane-azure.json"
	WorkerNodeAzureJSON     = "worker-node-azure.json"
	LinuxAzureJSONPath      = "/etc/kubernetes/azure.json"
	WindowsAzureJSONPath    = "c:/k/azure.json"
	CloudProviderLabel      = "cloud-provider"
	CloudProviderAzure      = "azure"
	cloudControllerManager  = "cloud-controller-manager"
	cloudNodeManager        = "cloud-node-manager"
	controlPlaneRoleLabel   = "node-role.kubernetes.io/control-plane"
	ccmSecurePort           = "10268"
	azureJSONPermissions    = "0644"
	cloudProviderAzureChart = "kubernetes-sigs/cloud-provider-azure helm chart"
)

// cloudProviderAzureVersions are the cloud-provider-azure releases the
// project's Helm chart picks for each Kubernetes minor
// (helm/cloud-provider-azure/templates/cloud-provider-azure.yaml).
var cloudProviderAzureVersions = map[int]string{
	21: "v1.0.23", 22: "v1.1.27", 23: "v1.23.30", 24: "v1.24.22", 25: "v1.25.24", 26: "v1.26.22", 27: "v1.27.21",
	28: "v1.28.14", 29: "v1.29.15", 30: "v1.30.15", 31: "v1.31.12", 32: "v1.32.17", 33: "v1.33.12", 34: "v1.34.9",
	35: "v1.35.4", 36: "v1.36.0",
}

// The chart pulls from mcr.microsoft.com/oss/kubernetes (values.yaml
// imageRepository) but from oss/v2 for Kubernetes 1.32 and later
// (helm/cloud-provider-azure/templates/cloud-provider-azure.yaml, "if ge
// .Capabilities.KubeVersion.Minor 32", cloud-provider-azure 7b31c76c).
const (
	cloudProviderAzureRepository   = "mcr.microsoft.com/oss/kubernetes"
	cloudProviderAzureRepositoryV2 = "mcr.microsoft.com/oss/v2/kubernetes"
	cloudProviderAzureV2Minor      = 32
)

// CloudProviderAzureImages are the cloud-controller-manager and
// cloud-node-manager images for a Kubernetes minor; ok is false for a minor
// cloud-provider-azure has no release for. From v1.32 the chart pulls them
// from the mcr.microsoft.com/oss/v2 repository.
func CloudProviderAzureImages(minor int) (ccm, cnm string, ok bool) {
	v, ok := cloudProviderAzureVersions[minor]
	if !ok {
		return "", "", false
	}
	repo := cloudProviderAzureRepository
	if minor >= cloudProviderAzureV2Minor {
		repo = cloudProviderAzureRepositoryV2
	}
	return repo + "/azure-cloud-controller-manager:" + v, repo + "/azure-cloud-node-manager:" + v, true
}

// azureJSONFile places the cloud config on a node from its Secret.
func azureJSONFile(secretOwner, key, path string) bootstrapv1.File {
	owner := "root:root"
	if path == WindowsAzureJSONPath {
		owner = ""
	}
	return bootstrapv1.File{
		Path: path, Owner: owner, Permissions: azureJSONPermissions,
		ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: secretOwner + AzureJSONSuffix, Key: key}},
	}
}

func hostPathVolume(name, path string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
}

func rule(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
}

// cloudProviderAzure is azure-cloud-controller-manager on the control plane
// and azure-cloud-node-manager on every node, as cloud-provider-azure's
// chart installs them. The node manager initializes each node from the
// instance metadata (the controller manager runs with -cloud-node); the
// controller manager runs the service (load balancer), route and node
// lifecycle controllers from the cloud config on the control-plane nodes.
func (b *builder) cloudProviderAzure() []runtime.Object {
	ccmImage, cnmImage, ok := CloudProviderAzureImages(b.v.Minor)
	if !ok { // a clusterctl template: the release is a variable
		ccmImage = sentinelCPARepository + "/azure-cloud-controller-manager:" + sentinelCPAVersion
		cnmImage = sentinelCPARepository + "/azure-cloud-node-manager:" + sentinelCPAVersion
	}
	objs := serviceAccount(cloudControllerManager,
		rule("", []string{"events"}, "create", "patch", "update"),
		rule("", []string{"nodes"}, "*"),
		rule("", []string{"nodes/status"}, "patch"),
		rule("", []string{"services"}, "list", "patch", "update", "watch"),
		rule("", []string{"services/status"}, "list", "patch", "update", "watch"),
		rule("", []string{"serviceaccounts"}, "create", "get", "list", "watch", "update"),
		rule("", []string{"persistentvolumes"}, "get", "list", "update", "watch"),
		rule("", []string{"endpoints"}, "create", "get", "list", "watch", "update"),
		rule("", []string{"secrets"}, "get", "list", "watch"),
		rule("coordination.k8s.io", []string{"leases"}, "get", "create", "update"),
		rule("discovery.k8s.io", []string{"endpointslices"}, "get", "list", "watch"),
	)
	// Delegated authentication of its secure port reads the
	// extension-apiserver-authentication ConfigMap.
	objs = append(objs, &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: "cloud-controller-manager:extension-apiserver-authentication-reader", Namespace: addonNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: cloudControllerManager, Namespace: addonNamespace}},
	})
	labels := map[string]string{"component": cloudControllerManager, "tier": "control-plane"}
	ccm := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: cloudControllerManager, Namespace: addonNamespace, Labels: map[string]string{"component": cloudControllerManager}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				PriorityClassName: systemNodeCrit, HostNetwork: true, ServiceAccountName: cloudControllerManager,
				NodeSelector: map[string]string{controlPlaneRoleLabel: ""},
				Tolerations: []corev1.Toleration{
					{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule},
					{Key: controlPlaneRoleLabel, Effect: corev1.TaintEffectNoSchedule},
					{Key: "node-role.kubernetes.io/etcd", Effect: corev1.TaintEffectNoExecute},
				},
				Containers: []corev1.Container{{
					Name: cloudControllerManager, Image: ccmImage, Command: []string{"cloud-controller-manager"},
					Args: []string{
						// The kube-controller-manager allocates pod CIDRs.
						// The overlay CNIs need no Azure routes; host-gw
						// needs the route controller to send each node's
						// pod CIDR to the node through the route table
						// azure.json names (cloud-provider-azure
						// pkg/provider/azure_routes.go, 7b31c76c).
						"--allocate-node-cidrs=false", "--configure-cloud-routes=" + fmt.Sprint(b.cni.backend == "host-gw"),
						"--cloud-config=" + LinuxAzureJSONPath, "--cloud-provider=azure",
						"--cluster-cidr=" + b.cni.podCIDR, "--cluster-name=" + b.o.ClusterName,
						"--controllers=*,-cloud-node", "--leader-elect=true", "--route-reconciliation-period=10s",
						"--secure-port=" + ccmSecurePort, "--v=2",
					},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "etc-kubernetes", MountPath: "/etc/kubernetes"},
						{Name: "ssl-mount", MountPath: "/etc/ssl", ReadOnly: true},
						{Name: "msi", MountPath: "/var/lib/waagent/ManagedIdentity-Settings", ReadOnly: true},
					},
				}},
				Volumes: []corev1.Volume{
					hostPathVolume("etc-kubernetes", "/etc/kubernetes"),
					hostPathVolume("ssl-mount", "/etc/ssl"),
					hostPathVolume("msi", "/var/lib/waagent/ManagedIdentity-Settings"),
				},
			}},
		},
	}
	objs = append(objs, ccm)
	objs = append(objs, serviceAccount(cloudNodeManager,
		rule("", []string{"nodes"}, "watch", "list", "get", "update", "patch"),
		rule("", []string{"nodes/status"}, "patch"),
	)...)
	nodeTolerations := []corev1.Toleration{
		{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	linux := daemonSet(cloudNodeManager, linuxOSLabel, corev1.PodSpec{
		ServiceAccountName: cloudNodeManager, HostNetwork: true, Tolerations: nodeTolerations,
		Containers: []corev1.Container{{
			Name: cloudNodeManager, Image: cnmImage, Command: []string{"cloud-node-manager"},
			Args: []string{"--node-name=$(NODE_NAME)", "--v=2"}, Env: []corev1.EnvVar{nodeNameEnv()},
			Resources: nodeManagerResources(),
		}},
	})
	objs = append(objs, linux)
	if !b.windows {
		return objs
	}
	// The Windows node manager in the chart's form
	// (helm/cloud-provider-azure/templates/cloud-provider-azure.yaml,
	// 260618b8): PowerShell runs a start script from a ConfigMap, which
	// takes the API server from kube-proxy's kubeconfig (a Windows host
	// reaches no Service address before kube-proxy runs) and rewrites its
	// token and CA paths into the sandbox, where they are on every node
	// (without the bind filter of containerd 1.7 on Windows Server 2022+
	// they are nowhere else: kubernetes/kubernetes#104562).
	scripts := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: cloudNodeManagerScripts, Namespace: addonNamespace},
		Data:       map[string]string{"start.ps1": cloudNodeManagerStartScript},
	}
	win := corev1.PodSpec{
		ServiceAccountName: cloudNodeManager,
		Containers: []corev1.Container{{
			Name: cloudNodeManager, Image: cnmImage,
			Command:   []string{"powershell.exe"},
			Args:      []string{windowsSandbox + "/scripts/start.ps1"},
			Env:       []corev1.EnvVar{nodeNameEnv()},
			Resources: nodeManagerResources(),
			VolumeMounts: []corev1.VolumeMount{
				{Name: "kube-proxy", MountPath: "/var/lib/cpaw"},
				{Name: cloudNodeManagerScripts, MountPath: "/scripts"},
			},
		}},
		Volumes: []corev1.Volume{configMapVolume("kube-proxy", "kube-proxy"), configMapVolume(cloudNodeManagerScripts, cloudNodeManagerScripts)},
	}
	hostProcess(&win)
	win.Tolerations = nodeTolerations
	return append(objs, scripts, daemonSet(cloudNodeManager+"-windows", windowsOSLabel, win))
}

const cloudNodeManagerScripts = "cloud-provider-azure-scripts"

// nodeManagerResources are the chart's defaults for both node managers
// (values.yaml cloudNodeManager.requests/limits).
func nodeManagerResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("50Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
}

// cloudNodeManagerStartScript does what the chart's start.ps1 does, in
// winkube's words.
const cloudNodeManagerStartScript = `# Point kube-proxy's kubeconfig at the token and CA inside this container's
# sandbox, where a HostProcess container finds its volumes on every
# Windows build, then run the node manager with it.
$sandbox = $env:CONTAINER_SANDBOX_MOUNT_POINT
$source = "$sandbox/var/lib/cpaw/kubeconfig.conf"
$target = "$sandbox/var/lib/cpaw/kubeconfig-cnm.conf"
(Get-Content -Raw $source) -replace '/var', "$sandbox/var" | Set-Content -Path $target
$cnmArgs = @("--node-name=$env:NODE_NAME", "--use-instance-metadata=true", "--kubeconfig=$target", "--v=2")
& "$sandbox/cloud-node-manager.exe" @cnmArgs
exit $LASTEXITCODE
`

func configMapVolume(name, configMap string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}}
}

// cloudProviderSupported says whether cloud-provider-azure has a release
// for the cluster's Kubernetes minor.
func cloudProviderSupported(v string, minor int) error {
	if _, _, ok := CloudProviderAzureImages(minor); !ok && v != sentinelVersion {
		return fmt.Errorf("cloud-provider-azure has no release for Kubernetes 1.%d (the %s knows 1.21 to 1.36): use v1.36 or older", minor, cloudProviderAzureChart)
	}
	return nil
}
