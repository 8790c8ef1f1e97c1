package flavors

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Azure Disk CSI driver (kubernetes-sigs/azuredisk-csi-driver) as an
// opt-in add-on, the way CAPZ's clusters run it. CAPZ installs the
// driver's Helm chart with a HelmChartProxy selecting Clusters labelled
// azuredisk-csi: "true" (templates/addons/cluster-api-helm/
// azuredisk-csi-driver.yaml, 69ec3a40), with no chart version, so Helm
// takes the newest release, 1.34.5, and the values controller.replicas 1,
// controller.runOnControlPlane true and windows.useHostProcessContainers
// true on clusters labelled cni-windows. winkube has no Helm add-on
// provider, so the flavors deliver what that release renders with those
// values as a ClusterResourceSet selected by the same label, as the other
// add-ons are delivered.
//
// Every object below is written here from the chart's templates, cited by
// file: kubernetes-sigs/azuredisk-csi-driver
// charts/v1.34.5/azuredisk-csi-driver/templates/<file> at d983d613
// (values.yaml gives the defaults the templates read). The objects Helm
// renders off with the chart's defaults (the snapshot controller and its
// CRDs, snapshot.enabled false; the csi-proxy form of the Windows
// DaemonSet) are left out, as Helm leaves them out.
const (
	AzureDiskCSILabel    = "azuredisk-csi"
	azureDiskCSIEnabled  = "true"
	azureDiskCSIDisabled = "false"
	// AzureDiskStorageClass is the StorageClass the add-on creates.
	AzureDiskStorageClass = "managed-csi"

	azureDiskDriver  = "disk.csi.azure.com"
	azureDiskVersion = "v1.34.5"
	azureDiskRepo    = "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi"
	// The chart's image.* values (baseRepo plus repository, tag).
	csiProvisionerImage         = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-provisioner:v6.3.0"
	csiAttacherImage            = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-attacher:v4.12.0"
	csiSnapshotterImage         = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-snapshotter:v8.6.0"
	csiResizerImage             = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-resizer:v2.2.0"
	csiLivenessProbeImage       = "mcr.microsoft.com/oss/v2/kubernetes-csi/livenessprobe:v2.19.0"
	csiNodeDriverRegistrarImage = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-node-driver-registrar:v2.17.0"

	azureDiskControllerName = "csi-azuredisk-controller"
	azureDiskControllerSA   = "csi-azuredisk-controller-sa"
	azureDiskNodeName       = "csi-azuredisk-node"
	azureDiskNodeWinName    = "csi-azuredisk-node-win"
	azureDiskNodeSA         = "csi-azuredisk-node-sa"
	// azureDiskRBACName is the chart's rbac.name, the roles' prefix.
	azureDiskRBACName = "azuredisk"
	// azureDiskCredFile is the chart's azureCredentialFileConfigMap: an
	// optional ConfigMap whose path naming the cloud config overrides
	// the driver's default (/etc/kubernetes/azure.json, C:\k\azure.json).
	azureDiskCredFile = "azure-cred-file"
	// The chart's ports: the controller's liveness endpoint and metrics,
	// the node plugin's health, metrics and registrar health.
	azureDiskControllerHealthPort = 29602
	azureDiskControllerMetrics    = 29604
	azureDiskNodeHealthPort       = 29603
	azureDiskNodeMetrics          = 29605
	azureDiskRegistrarHealthPort  = 29607
)

func (b *builder) azureDiskCSI() []client.Object {
	if !b.o.AzureDiskCSI {
		return nil
	}
	objs := azureDiskObjects()
	if b.o.WindowsTaint {
		// The chart's Windows DaemonSet tolerates node.kubernetes.io/os
		// only; the flavors' own Windows taint (os=windows:NoSchedule)
		// is tolerated by every Windows add-on here, this one included.
		ds := objs[len(objs)-2].(*appsv1.DaemonSet)
		ds.Spec.Template.Spec.Tolerations = append(ds.Spec.Template.Spec.Tolerations, windowsTaintToleration)
	}
	return b.crs(b.o.ClusterName+"-azuredisk-csi", map[string]string{AzureDiskCSILabel: azureDiskCSIEnabled},
		b.configMap("azuredisk-csi", objs...))
}

// azureDiskObjects are the chart's objects, grouped by kind: identities,
// the StorageClass and RBAC before the workloads that use them; the
// Windows DaemonSet is the last but one.
func azureDiskObjects() []runtime.Object {
	objs := []runtime.Object{
		azureDiskServiceAccount(azureDiskControllerSA),
		azureDiskServiceAccount(azureDiskNodeSA),
		azureDiskStorageClass(),
	}
	objs = append(objs, azureDiskControllerRBAC()...)
	objs = append(objs, azureDiskNodeRBAC()...)
	return append(objs, azureDiskCSIDriver(), azureDiskNodeLinux(), azureDiskNodeWindows(), azureDiskController())
}

// azureDiskLabels are the chart's azuredisk.labels (templates/
// _helpers.tpl) for CAPZ's release azuredisk-csi-driver-oot, without
// app.kubernetes.io/managed-by: Helm and helm.sh/chart, since no Helm
// release owns these objects; app, when set, is the label the
// workloads select their pods by.
func azureDiskLabels(app string) map[string]string {
	l := map[string]string{
		"app.kubernetes.io/instance": "azuredisk-csi-driver-oot",
		"app.kubernetes.io/name":     "azuredisk-csi-driver",
		"app.kubernetes.io/version":  "1.34.5",
	}
	if app != "" {
		l["app"] = app
	}
	return l
}

// serviceaccount-csi-azuredisk-controller.yaml and
// serviceaccount-csi-azuredisk-node.yaml.
func azureDiskServiceAccount(name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: addonNamespace, Labels: azureDiskLabels("")},
	}
}

// azureDiskStorageClass: the chart creates no StorageClass; this is the
// driver's example (deploy/example/storageclass-azuredisk-csi.yaml,
// a97da2d2), the class CAPZ's e2e AzureDiskCSISpec would create
// (test/e2e/kubernetes/storageclass/storageclass.go, 69ec3a40), so that a
// claim has a class to name.
func azureDiskStorageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		TypeMeta:             metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "StorageClass"},
		ObjectMeta:           metav1.ObjectMeta{Name: AzureDiskStorageClass},
		Provisioner:          azureDiskDriver,
		Parameters:           map[string]string{"skuName": "StandardSSD_LRS"},
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		AllowVolumeExpansion: ptr.To(true),
	}
}

func clusterRole(name string, labels map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules,
	}
}

func clusterRoleBinding(name, role, serviceAccount string, labels map[string]string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: addonNamespace}},
	}
}

// windowsTaintToleration tolerates the flavors' Windows taint
// (windowsTaint, os=windows:NoSchedule).
var windowsTaintToleration = corev1.Toleration{Key: "os", Operator: corev1.TolerationOpEqual, Value: windowsOSLabel, Effect: corev1.TaintEffectNoSchedule}

// leaseRule is the sidecars' leader election.
var leaseRule = rule("coordination.k8s.io", []string{"leases"}, "get", "watch", "list", "delete", "update", "create", "patch")

// azureDiskControllerRBAC is rbac-csi-azuredisk-controller.yaml: one
// ClusterRole per controller sidecar and the driver's Secret role, all
// bound to the controller's ServiceAccount. The binding names are the
// chart's (the resizer's ends in -role there too).
func azureDiskControllerRBAC() []runtime.Object {
	l := azureDiskLabels("")
	p := azureDiskRBACName
	roles := []struct {
		role, binding string
		rules         []rbacv1.PolicyRule
	}{
		{p + "-external-provisioner-role", p + "-csi-provisioner-binding", []rbacv1.PolicyRule{
			rule("", []string{"persistentvolumes"}, "get", "list", "watch", "create", "patch", "delete"),
			rule("", []string{"persistentvolumeclaims"}, "get", "list", "watch", "update"),
			rule("storage.k8s.io", []string{"storageclasses"}, "get", "list", "watch"),
			rule("", []string{"events"}, "get", "list", "watch", "create", "update", "patch"),
			rule("storage.k8s.io", []string{"csinodes"}, "get", "list", "watch"),
			rule("", []string{"nodes"}, "get", "list", "watch"),
			rule("snapshot.storage.k8s.io", []string{"volumesnapshots"}, "get", "list"),
			rule("snapshot.storage.k8s.io", []string{"volumesnapshotcontents"}, "get", "list"),
			leaseRule,
		}},
		{p + "-external-attacher-role", p + "-csi-attacher-binding", []rbacv1.PolicyRule{
			rule("", []string{"persistentvolumes"}, "get", "list", "watch", "update"),
			rule("", []string{"nodes"}, "get", "list", "watch"),
			rule("csi.storage.k8s.io", []string{"csinodeinfos"}, "get", "list", "watch"),
			rule("storage.k8s.io", []string{"volumeattachments"}, "get", "list", "watch", "update", "patch"),
			rule("storage.k8s.io", []string{"volumeattachments/status"}, "get", "list", "watch", "update", "patch"),
			rule("storage.k8s.io", []string{"volumeattributesclasses"}, "get"),
			leaseRule,
		}},
		{p + "-external-snapshotter-role", p + "-csi-snapshotter-binding", []rbacv1.PolicyRule{
			rule("", []string{"events"}, "list", "watch", "create", "update", "patch"),
			rule("", []string{"secrets"}, "get", "list"),
			rule("snapshot.storage.k8s.io", []string{"volumesnapshotclasses"}, "get", "list", "watch"),
			rule("snapshot.storage.k8s.io", []string{"volumesnapshotcontents"}, "create", "get", "list", "watch", "update", "delete", "patch"),
			rule("snapshot.storage.k8s.io", []string{"volumesnapshotcontents/status"}, "update", "patch"),
			leaseRule,
		}},
		{p + "-external-resizer-role", p + "-csi-resizer-role", []rbacv1.PolicyRule{
			rule("", []string{"persistentvolumes"}, "get", "list", "watch", "update", "patch"),
			rule("", []string{"persistentvolumeclaims"}, "get", "list", "watch"),
			rule("", []string{"persistentvolumeclaims/status"}, "update", "patch"),
			rule("", []string{"events"}, "list", "watch", "create", "update", "patch"),
			leaseRule,
			rule("", []string{"pods"}, "get", "list", "watch"),
			rule("storage.k8s.io", []string{"volumeattributesclasses"}, "get", "list", "watch"),
		}},
	}
	var out []runtime.Object
	for _, r := range roles {
		out = append(out, clusterRole(r.role, l, r.rules...), clusterRoleBinding(r.binding, r.role, azureDiskControllerSA, l))
	}
	// The cloud config Secret (--cloud-config-secret-name); the chart
	// gives these two no labels.
	secretRole := "csi-" + p + "-controller-secret-role"
	return append(out, clusterRole(secretRole, nil, rule("", []string{"secrets"}, "get")),
		clusterRoleBinding("csi-"+p+"-controller-secret-binding", secretRole, azureDiskControllerSA, nil))
}

// azureDiskNodeRBAC is rbac-csi-azuredisk-node.yaml.
func azureDiskNodeRBAC() []runtime.Object {
	role := "csi-" + azureDiskRBACName + "-node-role"
	return []runtime.Object{
		clusterRole(role, nil,
			rule("", []string{"secrets"}, "get"),
			rule("", []string{"nodes"}, "get", "patch"),
			rule("storage.k8s.io", []string{"csinodes"}, "get"),
			rule("storage.k8s.io", []string{"volumeattachments"}, "get", "list", "watch"),
		),
		clusterRoleBinding("csi-"+azureDiskRBACName+"-node-secret-binding", role, azureDiskNodeSA, nil),
	}
}

// azureDiskCSIDriver is csi-azuredisk-driver.yaml with the chart's
// feature.enableFSGroupPolicy true and enableSELinuxMount false.
func azureDiskCSIDriver() *storagev1.CSIDriver {
	return &storagev1.CSIDriver{
		TypeMeta: metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "CSIDriver"},
		ObjectMeta: metav1.ObjectMeta{Name: azureDiskDriver,
			Annotations: map[string]string{"csiDriver": azureDiskVersion, "snapshot": "v8.6.0"}},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired: ptr.To(true),
			PodInfoOnMount: ptr.To(false),
			FSGroupPolicy:  ptr.To(storagev1.FileFSGroupPolicy),
		},
	}
}

// resources is a container's requests and memory limit, the chart's
// *.resources values.
func resources(cpu, memory, limit string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
	}
}

// dropAll is the chart's container securityContext: every capability
// dropped (a Windows kubelet ignores it).
func dropAll() *corev1.SecurityContext {
	return &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func runtimeDefaultSeccomp() *corev1.SeccompProfile {
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
}

// notVirtualKubelet is the node plugins' nodeAffinity (linux.nodeAffinity
// and windows.nodeAffinity in values.yaml).
func notVirtualKubelet() *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"virtual-kubelet"}}},
		}}},
	}}
}

// credFileEnv is AZURE_CREDENTIAL_FILE from the optional azure-cred-file
// ConfigMap (key path on Linux, path-windows on Windows).
func credFileEnv(key string) corev1.EnvVar {
	return corev1.EnvVar{Name: "AZURE_CREDENTIAL_FILE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: azureDiskCredFile}, Key: key, Optional: ptr.To(true),
	}}}
}

func kubeNodeNameEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "KUBE_NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}
}

func hostPathOf(name, path string, t corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(t)}}}
}

func healthz(host string, port intstr.IntOrString, initial, timeout, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: host, Path: "/healthz", Port: port}},
		InitialDelaySeconds: initial, TimeoutSeconds: timeout, PeriodSeconds: period, FailureThreshold: failures,
	}
}

func tcpPort(name string, port int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP}
}

// azureDiskController is csi-azuredisk-controller.yaml with
// controller.replicas 1 and controller.runOnControlPlane true (CAPZ's
// values) and the chart's defaults otherwise: hostNetwork, so the
// liveness-probe sidecar serves on localhost:29602.
func azureDiskController() *appsv1.Deployment {
	socket := corev1.VolumeMount{Name: "socket-dir", MountPath: "/csi"}
	address := env("ADDRESS", "/csi/csi.sock")
	sidecar := func(name, image string, limit string, args ...string) corev1.Container {
		return corev1.Container{Name: name, Image: image, Args: args, Env: address, VolumeMounts: []corev1.VolumeMount{socket},
			Resources: resources("10m", "20Mi", limit), SecurityContext: dropAll()}
	}
	ns := "--leader-election-namespace=" + addonNamespace
	provisioner := sidecar("csi-provisioner", csiProvisionerImage, "500Mi",
		"--feature-gates=Topology=true,VolumeAttributesClass=true", "--csi-address=$(ADDRESS)", "--v=2", "--timeout=30s",
		"--leader-election", ns, "--worker-threads=100", "--extra-create-metadata=true", "--strict-topology=true",
		"--kube-api-qps=50", "--kube-api-burst=100", "--retry-interval-max=30m")
	attacher := sidecar("csi-attacher", csiAttacherImage, "500Mi",
		"-v=2", "-csi-address=$(ADDRESS)", "-timeout=600s", "-leader-election", ns, "-worker-threads=1000",
		"-kube-api-qps=200", "-kube-api-burst=400")
	// The snapshotter runs even with snapshot.enabled false, as the
	// template always renders it.
	snapshotter := sidecar("csi-snapshotter", csiSnapshotterImage, "400Mi",
		"-csi-address=$(ADDRESS)", "-leader-election", ns, "-v=2", "--timeout=1200s", "--extra-create-metadata=true",
		"--retry-interval-max=30m", "--worker-threads=250", "--kube-api-qps=100", "--kube-api-burst=200")
	resizer := sidecar("csi-resizer", csiResizerImage, "500Mi",
		"-csi-address=$(ADDRESS)", "-v=2", "-leader-election", ns, "-handle-volume-inuse-error=false",
		"--feature-gates=RecoverVolumeExpansionFailure=true,VolumeAttributesClass=true", "-timeout=240s", "--retry-interval-max=30m")
	liveness := corev1.Container{Name: "liveness-probe", Image: csiLivenessProbeImage,
		Args:         []string{"--csi-address=/csi/csi.sock", "--probe-timeout=3s", "--http-endpoint=localhost:29602", "--v=2"},
		VolumeMounts: []corev1.VolumeMount{socket}, Resources: resources("10m", "20Mi", "100Mi"), SecurityContext: dropAll()}
	driver := corev1.Container{
		Name: "azuredisk", Image: azureDiskRepo + ":" + azureDiskVersion,
		Args: []string{"--v=5", "--endpoint=$(CSI_ENDPOINT)", "--metrics-address=0.0.0.0:29604", "--disable-avset-nodes=false",
			"--vm-type=", "--drivername=" + azureDiskDriver, "--cloud-config-secret-name=azure-cloud-provider",
			"--cloud-config-secret-namespace=kube-system", "--custom-user-agent=", "--user-agent-suffix=OSS-helm",
			"--allow-empty-cloud-config=false", "--vmss-cache-ttl-seconds=-1", "--kube-api-qps=0", "--kube-api-burst=0",
			"--enable-traffic-manager=false", "--traffic-manager-port=7788", "--enable-otel-tracing=false",
			"--check-disk-lun-collision=true", "--vmss-detach-timeout-seconds=200"},
		Ports:           []corev1.ContainerPort{tcpPort("metrics", azureDiskControllerMetrics)},
		LivenessProbe:   healthz("localhost", intstr.FromInt32(azureDiskControllerHealthPort), 30, 10, 30, 5),
		Env:             []corev1.EnvVar{credFileEnv("path"), {Name: "CSI_ENDPOINT", Value: "unix:///csi/csi.sock"}, {Name: "AZURE_GO_SDK_LOG_LEVEL"}},
		ImagePullPolicy: corev1.PullIfNotPresent,
		VolumeMounts:    []corev1.VolumeMount{socket, {Name: "azure-cred", MountPath: "/etc/kubernetes/"}},
		Resources:       resources("10m", "20Mi", "500Mi"), SecurityContext: dropAll(),
	}
	noSchedule := func(key string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	}
	labels := azureDiskLabels(azureDiskControllerName)
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: azureDiskControllerName, Namespace: addonNamespace, Labels: azureDiskLabels("")},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": azureDiskControllerName}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:        true,
					ServiceAccountName: azureDiskControllerSA,
					NodeSelector:       map[string]string{corev1.LabelOSStable: linuxOSLabel},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchExpressions: []corev1.NodeSelectorRequirement{{Key: controlPlaneRoleLabel, Operator: corev1.NodeSelectorOpExists}},
						}}},
					}},
					PriorityClassName: "system-cluster-critical",
					SecurityContext:   &corev1.PodSecurityContext{SeccompProfile: runtimeDefaultSeccomp()},
					Tolerations: []corev1.Toleration{noSchedule("node-role.kubernetes.io/master"), noSchedule("node-role.kubernetes.io/controlplane"),
						noSchedule(controlPlaneRoleLabel), noSchedule("CriticalAddonsOnly")},
					Containers: []corev1.Container{provisioner, attacher, snapshotter, resizer, liveness, driver},
					Volumes: []corev1.Volume{
						{Name: "socket-dir", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						hostPathOf("azure-cred", "/etc/kubernetes/", corev1.HostPathDirectoryOrCreate),
					},
				},
			},
		},
	}
}

func rollingOne() appsv1.DaemonSetUpdateStrategy {
	return appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
}

func azureDiskDaemonSet(name string, pod corev1.PodSpec) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: addonNamespace, Labels: azureDiskLabels("")},
		Spec: appsv1.DaemonSetSpec{
			UpdateStrategy: rollingOne(),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template:       corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: azureDiskLabels(name)}, Spec: pod},
		},
	}
}

// azureDiskNodeLinux is csi-azuredisk-node.yaml with the chart's
// defaults. The liveness-probe sidecar's flag and the driver's ports
// follow the template's test of node.hostNetwork, a value the chart never
// sets: it renders false, so the sidecar serves --health-port=29603 on
// the pod's (the host's) address and the driver declares that port, while
// the registrar's health endpoint follows linux.hostNetwork (true).
func azureDiskNodeLinux() *appsv1.DaemonSet {
	socket := corev1.VolumeMount{Name: "socket-dir", MountPath: "/csi"}
	liveness := corev1.Container{Name: "liveness-probe", Image: csiLivenessProbeImage, VolumeMounts: []corev1.VolumeMount{socket},
		Args:      []string{"--csi-address=/csi/csi.sock", "--probe-timeout=10s", "--health-port=29603", "--v=2"},
		Resources: resources("10m", "20Mi", "100Mi"), SecurityContext: dropAll()}
	registrar := corev1.Container{
		Name: "node-driver-registrar", Image: csiNodeDriverRegistrarImage,
		Args:            []string{"--csi-address=$(ADDRESS)", "--kubelet-registration-path=$(DRIVER_REG_SOCK_PATH)", "--v=2", "--http-endpoint=localhost:29607"},
		Env:             env("ADDRESS", "/csi/csi.sock", "DRIVER_REG_SOCK_PATH", "/var/lib/kubelet/plugins/"+azureDiskDriver+"/csi.sock"),
		VolumeMounts:    []corev1.VolumeMount{socket, {Name: "registration-dir", MountPath: "/registration"}},
		Resources:       resources("10m", "20Mi", "100Mi"),
		Ports:           []corev1.ContainerPort{tcpPort("healthz", azureDiskRegistrarHealthPort)},
		LivenessProbe:   healthz("localhost", intstr.FromString("healthz"), 20, 10, 20, 2),
		SecurityContext: dropAll(),
	}
	driver := corev1.Container{
		Name: "azuredisk", Image: azureDiskRepo + ":" + azureDiskVersion,
		Args: []string{"--v=5", "--endpoint=$(CSI_ENDPOINT)", "--nodeid=$(KUBE_NODE_NAME)", "--enable-perf-optimization=true",
			"--drivername=" + azureDiskDriver, "--volume-attach-limit=-1", "--reserved-data-disk-slot-num=0",
			"--cloud-config-secret-name=azure-cloud-provider", "--cloud-config-secret-namespace=kube-system", "--custom-user-agent=",
			"--user-agent-suffix=OSS-helm", "--allow-empty-cloud-config=true", "--support-zone=true", "--get-node-info-from-labels=false",
			"--get-nodeid-from-imds=false", "--enable-otel-tracing=false", "--metrics-address=0.0.0.0:29605", "--remove-not-ready-taint=true"},
		Ports:         []corev1.ContainerPort{tcpPort("healthz", azureDiskNodeHealthPort), tcpPort("metrics", azureDiskNodeMetrics)},
		LivenessProbe: healthz("", intstr.FromString("healthz"), 30, 30, 30, 5),
		Env: []corev1.EnvVar{credFileEnv("path"), {Name: "CSI_ENDPOINT", Value: "unix:///csi/csi.sock"}, kubeNodeNameEnv(),
			{Name: "AZURE_GO_SDK_LOG_LEVEL"}},
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		Lifecycle:       &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/azurediskplugin", "--pre-stop-hook=true"}}}},
		VolumeMounts: []corev1.VolumeMount{socket,
			{Name: "mountpoint-dir", MountPath: "/var/lib/kubelet/", MountPropagation: ptr.To(corev1.MountPropagationBidirectional)},
			{Name: "azure-cred", MountPath: "/etc/kubernetes/"},
			{Name: "device-dir", MountPath: "/dev"},
			{Name: "sys-devices-dir", MountPath: "/sys/bus/scsi/devices"},
			{Name: "sys-class", MountPath: "/sys/class/"},
		},
		Resources: resources("10m", "20Mi", "1000Mi"),
	}
	return azureDiskDaemonSet(azureDiskNodeName, corev1.PodSpec{
		HostNetwork:        true,
		DNSPolicy:          corev1.DNSDefault,
		ServiceAccountName: azureDiskNodeSA,
		NodeSelector:       map[string]string{corev1.LabelOSStable: linuxOSLabel},
		Affinity:           notVirtualKubelet(),
		PriorityClassName:  systemNodeCrit,
		SecurityContext:    &corev1.PodSecurityContext{SeccompProfile: runtimeDefaultSeccomp()},
		Tolerations:        tolerateAll(),
		Containers:         []corev1.Container{liveness, registrar, driver},
		Volumes: []corev1.Volume{
			hostPathOf("socket-dir", "/var/lib/kubelet/plugins/"+azureDiskDriver, corev1.HostPathDirectoryOrCreate),
			hostPathOf("mountpoint-dir", "/var/lib/kubelet/", corev1.HostPathDirectoryOrCreate),
			hostPathOf("registration-dir", "/var/lib/kubelet/plugins_registry/", corev1.HostPathDirectoryOrCreate),
			hostPathOf("azure-cred", "/etc/kubernetes/", corev1.HostPathDirectoryOrCreate),
			hostPathOf("device-dir", "/dev", corev1.HostPathDirectory),
			hostPathOf("sys-devices-dir", "/sys/bus/scsi/devices", corev1.HostPathDirectory),
			hostPathOf("sys-class", "/sys/class/", corev1.HostPathDirectory),
		},
	})
}

// azureDiskNodeWindows is csi-azuredisk-node-windows-hostprocess.yaml,
// which the chart renders with windows.useHostProcessContainers true:
// CAPZ sets it on clusters labelled cni-windows, as every Windows flavor
// here is (a Linux-only cluster has no node for either form). A
// HostProcess pod sees the host's filesystem, so the DaemonSet has no
// volumes: the init container makes the plugin directory, the registrar
// writes to the kubelet's plugins_registry itself, and the driver reads
// C:\k\azure.json, which CAPZ's Windows bootstrap writes. The paths are
// as the template writes them: its unquoted YAML keeps doubled
// backslashes, which Windows reads as one.
func azureDiskNodeWindows() *appsv1.DaemonSet {
	image := azureDiskRepo + ":" + azureDiskVersion + "-windows-hp"
	init := corev1.Container{
		Name: "init", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"powershell.exe", "-c", `New-Item -ItemType Directory -Path C:\var\lib\kubelet\plugins\` + azureDiskDriver + `\ -Force`},
		SecurityContext: dropAll(),
	}
	registrar := corev1.Container{
		Name: "node-driver-registrar", Image: csiNodeDriverRegistrarImage,
		Command: []string{"csi-node-driver-registrar.exe"},
		Args:    []string{"--csi-address=$(CSI_ENDPOINT)", "--kubelet-registration-path=$(DRIVER_REG_SOCK_PATH)", "--plugin-registration-path=$(PLUGIN_REG_DIR)", "--v=2"},
		Env: append(env(
			"CSI_ENDPOINT", `unix://C:\var\lib\kubelet\plugins\`+azureDiskDriver+`\csi.sock`,
			"DRIVER_REG_SOCK_PATH", `C:\\var\\lib\\kubelet\\plugins\\`+azureDiskDriver+`\\csi.sock`,
			"PLUGIN_REG_DIR", `C:\\var\\lib\\kubelet\\plugins_registry\\`,
		), corev1.EnvVar{Name: "KUBE_NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Resources:       resources("30m", "40Mi", "150Mi"),
		SecurityContext: dropAll(),
	}
	driver := corev1.Container{
		Name: "azuredisk", Image: image,
		Command: []string{"azurediskplugin.exe"},
		Args: []string{"--v=5", "--endpoint=$(CSI_ENDPOINT)", "--nodeid=$(KUBE_NODE_NAME)", "--drivername=" + azureDiskDriver,
			"--volume-attach-limit=-1", "--reserved-data-disk-slot-num=0", "--cloud-config-secret-name=azure-cloud-provider",
			"--cloud-config-secret-namespace=kube-system", "--custom-user-agent=", "--user-agent-suffix=OSS-helm",
			"--allow-empty-cloud-config=true", "--support-zone=true", "--enable-windows-host-process=true",
			"--get-nodeid-from-imds=false", "--enable-otel-tracing=false", "--metrics-address=0.0.0.0:29605", "--remove-not-ready-taint=true"},
		Ports: []corev1.ContainerPort{tcpPort("metrics", azureDiskNodeMetrics)},
		Env: []corev1.EnvVar{credFileEnv("path-windows"),
			{Name: "CSI_ENDPOINT", Value: `unix://C:\\var\\lib\\kubelet\\plugins\\` + azureDiskDriver + `\\csi.sock`},
			kubeNodeNameEnv(), {Name: "AZURE_GO_SDK_LOG_LEVEL"}},
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: dropAll(),
		Lifecycle:       &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/azurediskplugin.exe", "--pre-stop-hook=true"}}}},
		Resources:       resources("10m", "40Mi", "1000Mi"),
	}
	return azureDiskDaemonSet(azureDiskNodeWinName, corev1.PodSpec{
		ServiceAccountName: azureDiskNodeSA,
		Tolerations:        []corev1.Toleration{{Key: "node.kubernetes.io/os", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		NodeSelector:       map[string]string{corev1.LabelOSStable: windowsOSLabel},
		Affinity:           notVirtualKubelet(),
		PriorityClassName:  systemNodeCrit,
		SecurityContext: &corev1.PodSecurityContext{SeccompProfile: runtimeDefaultSeccomp(), WindowsOptions: &corev1.WindowsSecurityContextOptions{
			HostProcess: ptr.To(true), RunAsUserName: ptr.To(`NT AUTHORITY\SYSTEM`),
		}},
		HostNetwork:    true,
		InitContainers: []corev1.Container{init},
		Containers:     []corev1.Container{registrar, driver},
	})
}
