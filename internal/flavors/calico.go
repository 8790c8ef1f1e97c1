package flavors

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// Calico's manifest install in Kubernetes-datastore mode (no operator, no
// Typha): the CRDs, calico-config, calico-node with install-cni and its host
// mounts, calico-kube-controllers, and their RBAC. Written from Calico's
// manifests/calico-vxlan.yaml and calico-windows-vxlan.yaml (v3.28).
const (
	calicoCNILinux     = "docker.io/calico/cni"
	calicoKubeCtrl     = "docker.io/calico/kube-controllers"
	calicoGroup        = "crd.projectcalico.org"
	calicoConfigName   = "calico-config"
	calicoNodeSA       = "calico-node"
	calicoCNIPluginSA  = "calico-cni-plugin"
	calicoKubeCtrlName = "calico-kube-controllers"
	// AzureWireserver is Azure's host endpoint for the VM agent and
	// metadata; pods must not reach it (it would hand them the node's
	// secrets), so CAPZ blocks it with a Calico policy.
	AzureWireserver = "168.63.129.16/32"
	clusterDNS      = "10.96.0.10"
)

// calicoKinds are the kinds Calico's manifests define, with their scope.
var calicoKinds = []struct {
	kind       string
	namespaced bool
}{
	{"BGPConfiguration", false}, {"BGPFilter", false}, {"BGPPeer", false}, {"BlockAffinity", false},
	{"CalicoNodeStatus", false}, {"ClusterInformation", false}, {"FelixConfiguration", false},
	{"GlobalNetworkPolicy", false}, {"GlobalNetworkSet", false}, {"HostEndpoint", false}, {"IPAMBlock", false},
	{"IPAMConfig", false}, {"IPAMHandle", false}, {"IPPool", false}, {"IPReservation", false},
	{"KubeControllersConfiguration", false}, {"NetworkPolicy", true}, {"NetworkSet", true},
}

func plural(kind string) string {
	lower := []rune{}
	for _, r := range kind {
		if r >= 'A' && r <= 'Z' {
			r += 'a' - 'A'
		}
		lower = append(lower, r)
	}
	s := string(lower)
	if s[len(s)-1] == 'y' {
		return s[:len(s)-1] + "ies"
	}
	if s[len(s)-1] == 's' {
		return s + "es"
	}
	return s + "s"
}

// calicoCRDs are compact definitions of Calico's kinds: the names, scope
// and version Calico's clients use, with a schema that keeps every field
// (x-kubernetes-preserve-unknown-fields) instead of Calico's full
// validation schemas.
func calicoCRDs() []runtime.Object {
	out := make([]runtime.Object, 0, len(calicoKinds))
	for _, k := range calicoKinds {
		scope := apiextensionsv1.ClusterScoped
		if k.namespaced {
			scope = apiextensionsv1.NamespaceScoped
		}
		p := plural(k.kind)
		out = append(out, &apiextensionsv1.CustomResourceDefinition{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: p + "." + calicoGroup},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: calicoGroup, Scope: scope,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: k.kind, ListKind: k.kind + "List", Plural: p, Singular: p[:len(p)-1]},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true, Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)},
				}}},
			},
		})
	}
	return out
}

func crdRules(verbs []string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{calicoGroup}, Resources: resources, Verbs: verbs}
}

var readVerbs = []string{"get", "list", "watch"}

// calicoNodeRBAC is what calico-node (Felix, startup, install-cni) does in
// Kubernetes-datastore mode, and the CNI plugin's own identity.
func calicoNodeRBAC() []runtime.Object {
	node := serviceAccount(calicoNodeSA,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "nodes", "namespaces", "configmaps"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces", "serviceaccounts", "nodes"}, Verbs: []string{"list", "watch", "get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status", "pods/status"}, Verbs: []string{"patch", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{calicoCNIPluginSA}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"watch", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"watch", "list"}},
		crdRules(readVerbs, "felixconfigurations", "bgppeers", "bgpfilters", "bgpconfigurations", "ippools", "ipreservations", "ipamblocks",
			"globalnetworkpolicies", "globalnetworksets", "networkpolicies", "networksets", "clusterinformations", "hostendpoints", "blockaffinities", "caliconodestatuses"),
		crdRules([]string{"create", "update"}, "ippools", "felixconfigurations", "clusterinformations", "caliconodestatuses"),
		crdRules([]string{"get", "list", "create", "update", "delete"}, "blockaffinities", "ipamblocks", "ipamhandles"),
		crdRules([]string{"get", "create"}, "ipamconfigs"),
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
	)
	plugin := serviceAccount(calicoCNIPluginSA,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "nodes", "namespaces"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}},
		crdRules([]string{"get", "list", "create", "update", "delete"}, "blockaffinities", "ipamblocks", "ipamhandles", "clusterinformations", "ippools", "ipreservations", "ipamconfigs"),
	)
	return append(node, plugin...)
}

func cmKey(envName, configMap, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: envName, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}, Key: key}}}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// calicoConfig is calico-config: the backend, the overlay MTU and the CNI
// configuration install-cni writes on each Linux node.
func (b *builder) calicoConfig() *corev1.ConfigMap {
	cni := map[string]any{
		"name": "k8s-pod-network", "cniVersion": "0.3.1",
		"plugins": []any{
			map[string]any{"type": "calico", "log_level": "info", "log_file_path": "/var/log/calico/cni/cni.log", "datastore_type": "kubernetes",
				"nodename": "__KUBERNETES_NODE_NAME__", "mtu": "__CNI_MTU__", "ipam": map[string]any{"type": "calico-ipam"},
				"policy": map[string]any{"type": "k8s"}, "kubernetes": map[string]any{"kubeconfig": "__KUBECONFIG_FILEPATH__"}},
			map[string]any{"type": "portmap", "snat": true, "capabilities": map[string]any{"portMappings": true}},
			map[string]any{"type": "bandwidth", "capabilities": map[string]any{"bandwidth": true}},
		},
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: calicoConfigName, Namespace: addonNamespace},
		Data: map[string]string{
			"typha_service_name": "none", "calico_backend": "vxlan", "veth_mtu": fmt.Sprint(OverlayMTU),
			"cni_network_config": jsonString(cni),
		},
	}
}

// calicoLinux is Calico on Linux nodes: calico-node (VXLAN, VNI 4096, MTU
// 1350) with install-cni, calico-kube-controllers, and the objects they need.
func (b *builder) calicoLinux() []runtime.Object {
	objs := calicoCRDs()
	objs = append(objs, calicoNodeRBAC()...)
	objs = append(objs, b.calicoConfig())
	dirOrCreate := ptr.To(corev1.HostPathDirectoryOrCreate)
	hostVol := func(name, path string, t *corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: t}}}
	}
	privileged := &corev1.SecurityContext{Privileged: ptr.To(true)}
	pod := corev1.PodSpec{
		ServiceAccountName: calicoNodeSA, HostNetwork: true, Tolerations: tolerateAll(),
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		InitContainers: []corev1.Container{{
			Name: "install-cni", Image: calicoCNILinux + ":" + calicoVersion, Command: []string{"/opt/cni/bin/install"},
			Env: []corev1.EnvVar{
				{Name: "CNI_CONF_NAME", Value: "10-calico.conflist"},
				cmKey("CNI_NETWORK_CONFIG", calicoConfigName, "cni_network_config"),
				fieldEnv("KUBERNETES_NODE_NAME", "spec.nodeName"),
				cmKey("CNI_MTU", calicoConfigName, "veth_mtu"),
				{Name: "SLEEP", Value: "false"},
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "cni-bin-dir", MountPath: "/host/opt/cni/bin"},
				{Name: "cni-net-dir", MountPath: "/host/etc/cni/net.d"},
			},
			SecurityContext: privileged,
		}},
		Containers: []corev1.Container{{
			Name: "calico-node", Image: calicoNodeLinux + ":" + calicoVersion,
			Env: []corev1.EnvVar{
				{Name: "DATASTORE_TYPE", Value: "kubernetes"},
				{Name: "WAIT_FOR_DATASTORE", Value: "true"},
				fieldEnv("NODENAME", "spec.nodeName"),
				cmKey("CALICO_NETWORKING_BACKEND", calicoConfigName, "calico_backend"),
				{Name: "CLUSTER_TYPE", Value: "k8s"},
				{Name: "IP", Value: "autodetect"},
				{Name: "IP_AUTODETECTION_METHOD", Value: "interface=eth0"},
				{Name: "CALICO_IPV4POOL_CIDR", Value: b.cni.podCIDR},
				{Name: "CALICO_IPV4POOL_IPIP", Value: "Never"},
				{Name: "CALICO_IPV4POOL_VXLAN", Value: "Always"},
				{Name: "CALICO_IPV6POOL_VXLAN", Value: "Never"},
				cmKey("FELIX_VXLANMTU", calicoConfigName, "veth_mtu"),
				{Name: "FELIX_VXLANVNI", Value: fmt.Sprint(VXLANVNI)},
				{Name: "FELIX_VXLANPORT", Value: fmt.Sprint(VXLANPort)},
				{Name: "CALICO_DISABLE_FILE_LOGGING", Value: "true"},
				{Name: "FELIX_DEFAULTENDPOINTTOHOSTACTION", Value: "ACCEPT"},
				{Name: "FELIX_IPV6SUPPORT", Value: "false"},
				{Name: "FELIX_HEALTHENABLED", Value: "true"},
			},
			SecurityContext: privileged,
			Resources:       corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/calico-node", "-felix-ready"}}},
				PeriodSeconds: 10, TimeoutSeconds: 10},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/calico-node", "-felix-live"}}},
				PeriodSeconds: 10, InitialDelaySeconds: 10, FailureThreshold: 6, TimeoutSeconds: 10},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "cni-net-dir", MountPath: "/host/etc/cni/net.d"},
				{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true},
				{Name: "xtables-lock", MountPath: "/run/xtables.lock"},
				{Name: "var-run-calico", MountPath: "/var/run/calico"},
				{Name: "var-lib-calico", MountPath: "/var/lib/calico"},
				{Name: "policysync", MountPath: "/var/run/nodeagent"},
				{Name: "cni-log-dir", MountPath: "/var/log/calico/cni", ReadOnly: true},
			},
		}},
		Volumes: []corev1.Volume{
			hostVol("lib-modules", "/lib/modules", nil),
			hostVol("var-run-calico", "/var/run/calico", dirOrCreate),
			hostVol("var-lib-calico", "/var/lib/calico", dirOrCreate),
			hostVol("xtables-lock", "/run/xtables.lock", ptr.To(corev1.HostPathFileOrCreate)),
			hostVol("cni-bin-dir", "/opt/cni/bin", dirOrCreate),
			hostVol("cni-net-dir", "/etc/cni/net.d", nil),
			hostVol("cni-log-dir", "/var/log/calico/cni", nil),
			hostVol("policysync", "/var/run/nodeagent", dirOrCreate),
		},
	}
	objs = append(objs, daemonSet("calico-node", linuxOSLabel, pod))
	return append(objs, b.calicoKubeControllers()...)
}

// calicoKubeControllers garbage-collects IPAM of deleted nodes and keeps
// Calico's node objects in step with Kubernetes'.
func (b *builder) calicoKubeControllers() []runtime.Object {
	objs := serviceAccount(calicoKubeCtrlName,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: readVerbs},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: readVerbs},
		crdRules([]string{"list"}, "ipreservations"),
		crdRules([]string{"get", "list", "create", "update", "delete", "watch"}, "blockaffinities", "ipamblocks", "ipamhandles"),
		crdRules([]string{"list", "watch"}, "ippools"),
		crdRules([]string{"get", "list", "create", "update", "delete"}, "hostendpoints"),
		crdRules([]string{"get", "list", "create", "update", "watch"}, "clusterinformations", "kubecontrollersconfigurations"),
	)
	labels := map[string]string{"k8s-app": calicoKubeCtrlName}
	deploy := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: calicoKubeCtrlName, Namespace: addonNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelOSStable: linuxOSLabel}, ServiceAccountName: calicoKubeCtrlName,
				PriorityClassName: "system-cluster-critical",
				Tolerations: []corev1.Toleration{
					{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
					{Key: controlPlaneRoleLabel, Effect: corev1.TaintEffectNoSchedule},
				},
				Containers: []corev1.Container{{
					Name: calicoKubeCtrlName, Image: calicoKubeCtrl + ":" + calicoVersion,
					Env: env("ENABLED_CONTROLLERS", "node", "DATASTORE_TYPE", "kubernetes"),
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/usr/bin/check-status", "-r"}}},
						PeriodSeconds: 10},
				}},
			}},
		},
	}
	return append(objs, deploy)
}

// calicoResources are the Calico objects applied once the CRDs exist:
// Windows' IPAM needs whole blocks per node (strictAffinity), and pods
// must not reach Azure's wireserver.
func (b *builder) calicoResources() []runtime.Object {
	ipam := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calicoGroup + "/v1", "kind": "IPAMConfig",
		"metadata": map[string]any{"name": "default"},
		"spec":     map[string]any{"strictAffinity": true, "autoAllocateBlocks": true, "maxBlocksPerHost": int64(0)},
	}}
	wireserver := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calicoGroup + "/v1", "kind": "GlobalNetworkPolicy",
		"metadata": map[string]any{"name": "default.deny-azure-wireserver"},
		"spec": map[string]any{
			"order": float64(100), "selector": "all()", "types": []any{"Egress"},
			"egress": []any{
				map[string]any{"action": "Deny", "protocol": "TCP", "destination": map[string]any{"nets": []any{AzureWireserver}, "ports": []any{int64(80)}}},
				map[string]any{"action": "Pass"},
			},
		},
	}}
	return []runtime.Object{ipam, wireserver}
}

// calicoWindows is Calico for Windows: HostProcess calico-node-windows with
// install-cni, VXLAN with VNI 4096 on the HNS dataplane, MTU 1350, and the
// OutBoundNAT exceptions in its CNI config.
func (b *builder) calicoWindows() []runtime.Object {
	cniConf := map[string]any{
		"name": "Calico", "cniVersion": "0.3.1",
		"plugins": []any{map[string]any{
			"type": "calico", "mode": "vxlan", "vxlan_mac_prefix": "0E-2A", "vxlan_vni": VXLANVNI, "mtu": OverlayMTU,
			"policy":                     map[string]any{"type": "k8s"},
			"windows_use_single_network": true,
			"ipam":                       map[string]any{"type": "calico-ipam", "subnet": "usePodCidr"},
			"policies": []any{
				map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "OutBoundNAT", "ExceptionList": b.outboundNATExceptions()}},
				map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "SDNROUTE", "DestinationPrefix": ServiceCIDR, "NeedEncap": true}},
			},
		}},
	}
	config := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "calico-windows-config", Namespace: addonNamespace},
		Data: map[string]string{
			"CALICO_NETWORKING_BACKEND": "vxlan",
			"CALICO_DATASTORE_TYPE":     "kubernetes",
			"VXLAN_VNI":                 fmt.Sprint(VXLANVNI),
			"VXLAN_PORT":                fmt.Sprint(VXLANPort),
			"VXLAN_MTU":                 fmt.Sprint(OverlayMTU),
			"WINDOWS_DATAPLANE":         "HNS",
			"KUBE_NETWORK":              b.windowsNetworkName(),
			"K8S_SERVICE_CIDR":          ServiceCIDR,
			"DNS_NAME_SERVERS":          clusterDNS,
			"CNI_BIN_DIR":               `c:\opt\cni\bin`,
			"CNI_CONF_DIR":              `c:\etc\cni\net.d`,
			"FELIX_HEALTHENABLED":       "true",
			"CNI_CONF":                  jsonString(cniConf),
		},
	}
	fromConfig := []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: config.Name}}}}
	nodename := []corev1.EnvVar{fieldEnv("NODENAME", "spec.nodeName"), nodeNameEnv()}
	pod := corev1.PodSpec{
		ServiceAccountName: calicoNodeSA,
		InitContainers: []corev1.Container{{
			Name: "install-cni", Image: calicoCNIWin + ":" + calicoVersion,
			Command: []string{"%CONTAINER_SANDBOX_MOUNT_POINT%/opt/cni/bin/install.exe"}, EnvFrom: fromConfig, Env: nodename,
		}},
		Containers: []corev1.Container{{
			Name: "calico-node-startup", Image: calicoNodeWin + ":" + calicoVersion,
			Command: []string{"%CONTAINER_SANDBOX_MOUNT_POINT%/CalicoWindows/node/node-service.ps1"}, EnvFrom: fromConfig,
			Env: append(append([]corev1.EnvVar(nil), nodename...), env("CALICO_NODENAME_FILE", "C:/etc/nodename", "FELIX_VXLANVNI", fmt.Sprint(VXLANVNI), "FELIX_VXLANPORT", fmt.Sprint(VXLANPort))...),
		}, {
			Name: "calico-node-felix", Image: calicoNodeWin + ":" + calicoVersion,
			Command: []string{"%CONTAINER_SANDBOX_MOUNT_POINT%/CalicoWindows/felix/felix-service.ps1"}, EnvFrom: fromConfig, Env: nodename,
		}},
	}
	hostProcess(&pod)
	return []runtime.Object{config, daemonSet("calico-node-windows", windowsOSLabel, pod)}
}
