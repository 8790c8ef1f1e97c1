package flavors

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// Calico's manifest install in Kubernetes-datastore mode with Typha (no
// operator): the CRDs, calico-config, calico-node with install-cni and its
// host mounts, Typha, calico-kube-controllers, and their RBAC. Written from
// Calico's manifests/calico-vxlan.yaml and calico-windows-vxlan.yaml
// (v3.28); Typha and the RBAC from manifests/calico-typha.yaml (v3.30.7).
const (
	calicoCNILinux     = "docker.io/calico/cni"
	calicoKubeCtrl     = "docker.io/calico/kube-controllers"
	calicoGroup        = "crd.projectcalico.org"
	calicoConfigName   = "calico-config"
	calicoNodeSA       = "calico-node"
	calicoCNIPluginSA  = "calico-cni-plugin"
	calicoKubeCtrlName = "calico-kube-controllers"
	// calicoTierGetterName is the manifest's role for
	// kube-controller-manager's garbage collector.
	calicoTierGetterName = "calico-tier-getter"
	// AzureWireserver is Azure's host endpoint for the VM agent and
	// metadata; pods must not reach it (it would hand them the node's
	// secrets), so CAPZ blocks it with a Calico policy.
	AzureWireserver = "168.63.129.16/32"
	clusterDNS      = "10.96.0.10"
)

// calicoManifest is Calico v3.30.7's manifests/calico-typha.yaml as the
// release ships it (projectcalico/calico, tag v3.30.7, 74485ea4; git blob
// 3215384b), unchanged: winkube takes every CRD with its schema, the
// ClusterRoles of calico-node, calico-cni-plugin, calico-kube-controllers
// and calico-tier-getter, and Typha's Service, Deployment and
// PodDisruptionBudget from it, so what a workload cluster gets is what the
// release grants and runs. Its CRDs and ClusterRoles are byte for byte
// those of manifests/calico-vxlan.yaml (blob 5f75d30c), the file embedded
// before Typha. Felix lists and watches every kind its syncer knows
// (libcalico-go/lib/backend/syncersv1/felixsyncer/felixsyncerv1.go),
// tiers, staged policies and the Kubernetes (Baseline)AdminNetworkPolicies
// among them, and with Typha, Typha does so for every Felix as
// calico-node; a rule missing there is a 403, which its watcher cache
// retries for ever, and Felix programs no data plane until every cache is
// in sync.
//
//go:embed calico-typha-v3.30.7.yaml
var calicoManifest string

// CalicoManifestBlob is the git blob id of manifests/calico-typha.yaml at
// Calico's tag v3.30.7: the embedded copy must hash to it.
const CalicoManifestBlob = "3215384b897ba5f8f5ddd7f2f2d1ff8df0f1b8fe"

// CalicoManifest is the embedded upstream manifest.
func CalicoManifest() string { return calicoManifest }

// CalicoManifestObjects are the manifest's objects, in its order.
func CalicoManifestObjects() []*unstructured.Unstructured {
	parsed := calicoParsed()
	out := make([]*unstructured.Unstructured, len(parsed))
	for i, u := range parsed {
		out[i] = u.DeepCopy()
	}
	return out
}

// calicoParsed is the manifest decoded once: half a megabyte of YAML.
var calicoParsed = sync.OnceValue(func() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(calicoManifest, -1) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			panic(fmt.Sprintf("the embedded Calico manifest: %v", err))
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
})

// calicoCRDs are every CustomResourceDefinition of the manifest, with
// Calico's own schemas.
func calicoCRDs() []runtime.Object {
	var out []runtime.Object
	for _, u := range CalicoManifestObjects() {
		if u.GetKind() == "CustomResourceDefinition" {
			out = append(out, u)
		}
	}
	return out
}

// calicoCRDChunk bounds each ConfigMap of Calico's CRDs: the CRDs
// together are half a megabyte, and `kubectl apply` (client-side, as the
// README's clusterctl example runs it) keeps each object's whole JSON in
// its last-applied annotation, whose limit is 256 KiB.
const calicoCRDChunk = 180_000

// calicoCRDConfigMaps hold Calico's CRDs, in the manifest's order, in
// ConfigMaps of at most calicoCRDChunk bytes, applied ahead of the objects
// of those kinds.
func (b *builder) calicoCRDConfigMaps() []*corev1.ConfigMap {
	var out []*corev1.ConfigMap
	for i, data := range calicoCRDChunks() {
		name := fmt.Sprintf("calico-crds-%d", i)
		out = append(out, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: b.o.ClusterName + "-" + name, Namespace: b.o.Namespace},
			Data:       map[string]string{name + ".yaml": data},
		})
	}
	return out
}

// calicoCRDChunks are the CRDs' YAML streams, rendered once.
var calicoCRDChunks = sync.OnceValue(func() []string {
	var out, chunk []string
	size := 0
	flush := func() {
		if len(chunk) > 0 {
			out = append(out, strings.Join(chunk, "---\n"))
		}
		chunk, size = nil, 0
	}
	for _, crd := range calicoCRDs() {
		doc := string(mustYAML(crd))
		if size+len(doc) > calicoCRDChunk {
			flush()
		}
		chunk, size = append(chunk, doc), size+len(doc)
	}
	flush()
	return out
})

// calicoManifestObject is a copy of the manifest's object of that kind and
// name. It copies that object alone: copying the whole manifest (its CRDs
// are half a megabyte) to pick one out was most of the time a flavor took
// to build its Calico add-ons.
func calicoManifestObject(kind, name string) *unstructured.Unstructured {
	for _, u := range calicoParsed() {
		if u.GetKind() == kind && u.GetName() == name {
			return u.DeepCopy()
		}
	}
	panic(fmt.Sprintf("the embedded Calico manifest has no %s %s", kind, name))
}

// calicoRules are the rules of the manifest's ClusterRole of that name.
func calicoRules(name string) []rbacv1.PolicyRule {
	role := &rbacv1.ClusterRole{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(calicoManifestObject("ClusterRole", name).Object, role); err != nil {
		panic(fmt.Sprintf("the embedded Calico manifest's ClusterRole %s: %v", name, err))
	}
	return role.Rules
}

// calicoTierGetter lets kube-controller-manager's garbage collector read
// tiers, as the manifest grants it (templates/tier-getter.yaml).
func calicoTierGetter() []runtime.Object {
	return []runtime.Object{
		calicoManifestObject("ClusterRole", calicoTierGetterName),
		calicoManifestObject("ClusterRoleBinding", calicoTierGetterName),
	}
}

// calicoNodeRBAC is calico-node's identity (Felix, startup, install-cni)
// and the CNI plugin's, with the release's rules.
func calicoNodeRBAC() []runtime.Object {
	node := serviceAccount(calicoNodeSA, calicoRules(calicoNodeSA)...)
	plugin := serviceAccount(calicoCNIPluginSA, calicoRules(calicoCNIPluginSA)...)
	return append(append(node, plugin...), calicoTierGetter()...)
}

func cmKey(envName, configMap, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: envName, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}, Key: key}}}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// calicoConfig is calico-config: Typha's Service, the backend, the
// overlay MTU and the CNI configuration install-cni writes on each Linux
// node. The backend stays vxlan where calico-typha.yaml says bird (BGP,
// with IPIP pools): Windows nodes route pods over VXLAN only.
func (b *builder) calicoConfig() *corev1.ConfigMap {
	cni := map[string]any{
		"name": "k8s-pod-network", "cniVersion": "0.3.1",
		"plugins": []any{
			map[string]any{"type": "calico", "log_level": "info", "log_file_path": "/var/log/calico/cni/cni.log", "datastore_type": "kubernetes",
				"nodename": "__KUBERNETES_NODE_NAME__", "mtu": "__CNI_MTU__", "ipam": map[string]any{"type": "calico-ipam"},
				"policy": map[string]any{"type": "k8s"}, "kubernetes": map[string]any{"kubeconfig": "__KUBECONFIG_FILEPATH__"}},
			// portmap and no more: calico/cni v3.30.7 installs only
			// calico, calico-ipam, host-local, portmap, loopback and
			// tuning (cni-plugin/Makefile @74485ea4), so a plugin the
			// release's chain lacks (bandwidth) fails every pod's CNI ADD
			// on a node image that did not bring it.
			map[string]any{"type": "portmap", "snat": true, "capabilities": map[string]any{"portMappings": true}},
		},
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: calicoConfigName, Namespace: addonNamespace},
		Data: map[string]string{
			"typha_service_name": calicoTyphaName, "calico_backend": "vxlan", "veth_mtu": fmt.Sprint(OverlayMTU),
			"cni_network_config": cniTemplate(cni),
		},
	}
}

// cniTemplate writes the CNI configuration template with __CNI_MTU__ as a
// bare token, as calico-vxlan.yaml has it (projectcalico/calico v3.30.7,
// 74485ea4): install-cni substitutes the text as it stands
// (cni-plugin/pkg/install/install.go), and the plugin reads mtu into an
// int (cni-plugin/pkg/types/types.go), so a quoted token became the
// string "1350" and every pod's CNI ADD failed to load the netconf.
func cniTemplate(conf map[string]any) string {
	return strings.Replace(jsonString(conf), `"__CNI_MTU__"`, "__CNI_MTU__", 1)
}

// servicesEndpoint is the optional kubernetes-services-endpoint ConfigMap
// that calico-typha.yaml v3.30.7 hands install-cni and calico-node
// (envFrom, to override KUBERNETES_SERVICE_HOST and _PORT; 74485ea4).
// The provider publishes it with the API server's load-balanced address,
// so on a new node they reach the API server without waiting for
// kube-proxy to program the kubernetes Service's ClusterIP.
func servicesEndpoint() []corev1.EnvFromSource {
	return []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: infrav1.ServicesEndpointConfigMap}, Optional: ptr.To(true)}}}
}

// calicoLinux is Calico on Linux nodes: calico-node (VXLAN, VNI 4096, MTU
// 1350) with install-cni, Typha, calico-kube-controllers, and the objects
// they need.
func (b *builder) calicoLinux() []runtime.Object {
	objs := calicoNodeRBAC()
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
			EnvFrom: servicesEndpoint(),
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
			EnvFrom: servicesEndpoint(),
			Env: []corev1.EnvVar{
				{Name: "DATASTORE_TYPE", Value: "kubernetes"},
				// Felix finds Typha through this Service's endpoints,
				// as calico-typha.yaml's calico-node does.
				cmKey("FELIX_TYPHAK8SSERVICENAME", calicoConfigName, "typha_service_name"),
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
				// Felix v3.30.7 turns TX checksum offload off on
				// vxlan.calico only for kernels up to 5.7
				// (felix/environment/feature_detect_linux.go, 74485ea4);
				// on Azure's newer kernels the SNATed node-to-Service
				// packets it encapsulates then carry a bad UDP checksum
				// and are dropped (projectcalico/calico#4865). CAPZ
				// forces the override for that reason
				// (templates/addons/calico/patches/calico-node.yaml,
				// cluster-api-provider-azure 69ec3a40).
				{Name: "FELIX_FEATUREDETECTOVERRIDE", Value: "ChecksumOffloadBroken=true"},
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
	objs = append(objs, b.calicoTypha()...)
	return append(objs, b.calicoKubeControllers()...)
}

// calicoKubeControllers garbage-collects IPAM of deleted nodes and keeps
// Calico's node objects in step with Kubernetes'.
func (b *builder) calicoKubeControllers() []runtime.Object {
	objs := serviceAccount(calicoKubeCtrlName, calicoRules(calicoKubeCtrlName)...)
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
// Windows' IPAM needs whole blocks per node (strictAffinity; the tigera
// operator refuses Windows without it, and CAPZ's
// templates/addons/windows/calico/calico.yaml sets it, 69ec3a40).
//
// Pods are kept from Azure's wireserver on each OS's own data plane, not
// by a Calico policy: Windows Felix does not support the Pass action such
// a policy needs, and a Pass ahead of the default tier skips the cluster's
// NetworkPolicies on Linux. Linux nodes drop forwarded traffic to it with
// iptables (linuxPreKubeadm) and Windows nodes with Felix's static HNS
// ACL (calicoStaticRules).
func (b *builder) calicoResources() []runtime.Object {
	ipam := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calicoGroup + "/v1", "kind": "IPAMConfig",
		"metadata": map[string]any{"name": "default"},
		"spec":     map[string]any{"strictAffinity": true, "autoAllocateBlocks": true, "maxBlocksPerHost": int64(0)},
	}}
	return append([]runtime.Object{ipam}, calicoTiers()...)
}

// calicoTiers are the tiers calico-node's start-up creates when they are
// missing (libcalico-go/lib/clientv3/client.go EnsureInitialized and
// ensureTierExists, with the names of lib/names/policy.go and the orders of
// api/pkg/apis/projectcalico/v3/tier.go, calico v3.30.7): the default tier
// that holds every untiered Calico and Kubernetes policy, and the tiers of
// AdminNetworkPolicies and BaselineAdminNetworkPolicies. Created with the
// add-ons, they exist before the first Felix lists tiers; a start-up that
// finds them leaves them as they are.
func calicoTiers() []runtime.Object {
	tier := func(name, action string, order int64) runtime.Object {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": calicoGroup + "/v1", "kind": "Tier",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"order": order, "defaultAction": action},
		}}
	}
	return []runtime.Object{
		tier("default", "Deny", 1_000_000),
		tier("adminnetworkpolicy", "Pass", 1_000),
		tier("baselineadminnetworkpolicy", "Pass", 10_000_000),
	}
}

// Calico for Windows as tigera/operator v1.38.16 renders it for Calico
// v3.30.7 (pkg/render/windows.go, 9cbd52a5; the operator's file
// 4a3cc3d1), applied by a ClusterResourceSet rather than by the operator:
// a ClusterResourceSet is how winkube delivers add-ons everywhere it runs
// (CAPZ's tigera chart needs Cluster API's Helm add-on provider, which a
// management cluster may not have). Differences from the operator's
// objects, each because winkube installs Calico from manifests: the
// namespace is kube-system (calico-node's ServiceAccount lives there, and
// the manifest's Typha), Typha without TLS as the manifest runs it (no
// FELIX_TYPHA* certificate settings or certificates), CLUSTER_TYPE without
// "operator".
const (
	calicoWindowsCNIConfig  = "cni-config-windows"
	calicoStaticRulesName   = "calico-static-rules"
	calicoCNIPluginType     = "Calico"
	windowsSandbox          = "$env:CONTAINER_SANDBOX_MOUNT_POINT"
	calicoWindowsWorkingDir = windowsSandbox + "/CalicoWindows/"
)

// servicesEndpointEnv is KUBERNETES_SERVICE_HOST and _PORT from the
// ConfigMap the tigera operator reads them from (kubernetes-services-
// endpoint; pkg/controller/utils/utils.go GetK8sServiceEndPoint), which
// the provider publishes once the API server's load balancer has its
// address: a Windows host reaches the kubernetes Service's ClusterIP only
// once kube-proxy has programmed it, and kube-proxy waits for Calico's
// HNS network.
func servicesEndpointEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		cmKey("KUBERNETES_SERVICE_HOST", infrav1.ServicesEndpointConfigMap, "KUBERNETES_SERVICE_HOST"),
		cmKey("KUBERNETES_SERVICE_PORT", infrav1.ServicesEndpointConfigMap, "KUBERNETES_SERVICE_PORT"),
	}
}

func hostProcessContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true), RunAsUserName: ptr.To(hostProcessUser)}}
}

func (b *builder) calicoWindowsCNIConfig() *corev1.ConfigMap {
	plugin := map[string]any{
		"type": "calico", "name": "Calico", "mode": "vxlan", "vxlan_mac_prefix": "0E-2A", "vxlan_vni": VXLANVNI, "mtu": OverlayMTU,
		"policy": map[string]any{"type": "k8s"}, "log_file_path": "c:/var/log/calico/cni/cni.log",
		// The CNI logging the operator's Installation defaults to
		// (pkg/controller/installation/core_controller.go fillDefaults).
		"log_level": "Info", "log_file_max_size": 100, "log_file_max_count": 10, "log_file_max_age": 30,
		"windows_loopback_DSR": "__DSR_SUPPORT__", "windows_use_single_network": true,
		"nodename": "__KUBERNETES_NODE_NAME__", "nodename_file": "__NODENAME_FILE__", "nodename_file_optional": true, "datastore_type": "kubernetes",
		"capabilities": map[string]any{"dns": true},
		"ipam":         map[string]any{"type": "calico-ipam", "subnet": "usePodCidr"},
		"kubernetes":   map[string]any{"kubeconfig": "__KUBECONFIG_FILEPATH__", "k8s_api_root": "https://__KUBERNETES_SERVICE_HOST__:__KUBERNETES_SERVICE_PORT__"},
		"DNS":          map[string]any{"Nameservers": []string{clusterDNS}, "Search": []string{"svc.cluster.local"}},
		"policies": []any{
			map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "OutBoundNAT", "ExceptionList": []string{ServiceCIDR}}},
			map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "SDNROUTE", "DestinationPrefix": ServiceCIDR, "NeedEncap": true}},
		},
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: calicoWindowsCNIConfig, Namespace: addonNamespace},
		Data:       map[string]string{"config": jsonString(map[string]any{"name": "Calico", "cniVersion": "0.3.1", "plugins": []any{plugin}})},
	}
}

// calicoStaticRules is the HNS ACL that keeps Windows pods from Azure's
// wireserver, as CAPZ ships it (templates/addons/windows/calico/calico.yaml,
// 69ec3a40, where nothing mounts it). What blocks the wireserver for
// Calico on Windows upstream is Felix's own static rules: Felix's Windows
// data plane adds the rules of static-rules.json, read from the directory
// of the calico-node.exe it runs as, to every endpoint's ACLs
// (felix/dataplane/windows/policysets/static_rules.go FileReader, calico
// v3.30.7 74485ea4), and Calico's Windows installer writes that file
// there for Azure (node/windows-packaging/install-calico-windows.ps1
// SetAKSCalicoStaticRules, the same rule). The tigera operator renders
// nothing for it (pkg/render/windows.go, v1.38.16).
//
// In a HostProcess container that directory is the image's CalicoWindows
// under the sandbox mount point. A single-file subPath mount cannot put
// the file there (Kubernetes' Windows storage page lists subPath as
// unsupported), so felix mounts the ConfigMap as a directory and copies
// the file beside calico-node.exe before felix-service.ps1 starts Felix.
// felixWithStaticRules is that command, through the image's PowerShell
// entrypoint.
const felixWithStaticRules = "Copy-Item -Force -Path " + windowsSandbox + "/" + calicoStaticRulesName + "/static-rules.json -Destination " +
	calicoWindowsWorkingDir + "static-rules.json; & " + windowsSandbox + "/CalicoWindows/felix-service.ps1"

func calicoStaticRules() *corev1.ConfigMap {
	rules := map[string]any{"Provider": "azure", "Version": "0.1", "Rules": []any{map[string]any{
		"Name": "EndpointPolicy",
		"Rule": map[string]any{"Id": "wireserver", "Type": "ACL", "Protocol": 6, "Action": "Block", "Direction": "Out",
			"RemoteAddresses": AzureWireserver, "RemotePorts": "80", "Priority": 200, "RuleType": "Switch"},
	}}}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: calicoStaticRulesName, Namespace: addonNamespace, Labels: map[string]string{"tier": "node", "app": "calico"}},
		Data:       map[string]string{"static-rules.json": jsonString(rules)},
	}
}

// calicoWindows is calico-node-windows: uninstall-calico and install-cni
// (Calico CNI) as init containers, then Felix and the node service, each
// a HostProcess container of Calico's images started through the images'
// PowerShell entrypoint from the scripts' directory.
func (b *builder) calicoWindows() []runtime.Object {
	dirOrCreate := ptr.To(corev1.HostPathDirectoryOrCreate)
	hostVol := func(name, path string, t *corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: t}}}
	}
	cniMounts := []corev1.VolumeMount{{Name: "cni-bin-dir", MountPath: "/host/opt/cni/bin"}, {Name: "cni-net-dir", MountPath: "/host/etc/cni/net.d"}}
	nodeImage, cniImage := calicoNodeWin+":"+calicoVersion, calicoCNIWin+":"+calicoVersion
	uninstall := corev1.Container{
		Name: "uninstall-calico", Image: nodeImage, Args: []string{windowsSandbox + "/uninstall-calico.ps1"},
		Env: env("SLEEP", "false", "CNI_PLUGIN_TYPE", calicoCNIPluginType, "CNI_BIN_DIR", "/host/opt/cni/bin",
			"CNI_CONF_NAME", "10-calico.conflist", "CNI_NET_DIR", "/host/etc/cni/net.d"),
		VolumeMounts: cniMounts, SecurityContext: hostProcessContext(),
	}
	installEnv := append(env("SLEEP", "false", "CNI_PLUGIN_TYPE", calicoCNIPluginType, "CNI_BIN_DIR", "/host/opt/cni/bin",
		"CNI_CONF_NAME", "10-calico.conflist", "CNI_NET_DIR", "/etc/cni/net.d", "KUBERNETES_DNS_SERVERS", clusterDNS,
		"KUBERNETES_SERVICE_CIDRS", ServiceCIDR, "VXLAN_VNI", fmt.Sprint(VXLANVNI)),
		fieldEnv("KUBERNETES_NODE_NAME", "spec.nodeName"), cmKey("CNI_NETWORK_CONFIG", calicoWindowsCNIConfig, "config"))
	install := corev1.Container{
		Name: "install-cni", Image: cniImage, Command: []string{windowsSandbox + "/opt/cni/bin/install.exe"},
		Env: append(installEnv, servicesEndpointEnv()...), VolumeMounts: cniMounts, SecurityContext: hostProcessContext(),
	}
	nodeEnv := append(env("CNI_PLUGIN_TYPE", calicoCNIPluginType, "DATASTORE_TYPE", "kubernetes", "WAIT_FOR_DATASTORE", "true",
		"CLUSTER_TYPE", "k8s,windows", "CALICO_DISABLE_FILE_LOGGING", "false", "FELIX_DEFAULTENDPOINTTOHOSTACTION", "ACCEPT",
		"FELIX_HEALTHENABLED", "true"), fieldEnv("NODENAME", "spec.nodeName"), fieldEnv("NAMESPACE", "metadata.namespace"))
	// Where the operator names its Typha (pkg/render/windows.go): the
	// manifest's, in kube-system. Felix dials the endpoints' node
	// addresses, not the ClusterIP (typha/pkg/discovery/discovery.go,
	// Calico v3.30.7), so it reaches Typha before kube-proxy-windows has
	// programmed any Service.
	nodeEnv = append(nodeEnv, env("FELIX_TYPHAK8SNAMESPACE", addonNamespace, "FELIX_TYPHAK8SSERVICENAME", calicoTyphaName)...)
	nodeEnv = append(nodeEnv, env("VXLAN_VNI", fmt.Sprint(VXLANVNI), "VXLAN_ADAPTER", "", "CALICO_MANAGE_CNI", "true",
		"KUBE_NETWORK", "Calico.*", "FELIX_VXLANMTU", fmt.Sprint(OverlayMTU), "FELIX_WIREGUARDMTU", fmt.Sprint(OverlayMTU), "CALICO_NETWORKING_BACKEND", "vxlan",
		"IP", "autodetect", "IP_AUTODETECTION_METHOD", "first-found", "IP6", "none", "FELIX_IPV6SUPPORT", "false")...)
	nodeEnv = append(nodeEnv, servicesEndpointEnv()...)
	nodeMounts := []corev1.VolumeMount{
		{Name: "var-run-calico", MountPath: "/var/run/calico"}, {Name: "var-lib-calico", MountPath: "/var/lib/calico"},
		{Name: "cni-log-dir", MountPath: "/var/log/calico/cni"}, {Name: "cni-net-dir", MountPath: "/host/etc/cni/net.d"},
	}
	felixExe := windowsSandbox + "/CalicoWindows/calico-node.exe"
	felix := corev1.Container{
		Name: "felix", Image: nodeImage, Args: []string{"-Command", felixWithStaticRules}, WorkingDir: calicoWindowsWorkingDir,
		Env: nodeEnv, SecurityContext: hostProcessContext(),
		VolumeMounts: append(append([]corev1.VolumeMount(nil), nodeMounts...), corev1.VolumeMount{Name: calicoStaticRulesName, MountPath: "/" + calicoStaticRulesName, ReadOnly: true}),
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{felixExe, "-felix-live"}}},
			InitialDelaySeconds: 10, FailureThreshold: 6, TimeoutSeconds: 10, PeriodSeconds: 10},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{felixExe, "-felix-ready"}}},
			TimeoutSeconds: 10, PeriodSeconds: 10},
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{felixExe, "-shutdown"}}}},
	}
	node := corev1.Container{
		Name: "node", Image: nodeImage, Args: []string{windowsSandbox + "/CalicoWindows/node-service.ps1"}, WorkingDir: calicoWindowsWorkingDir,
		Env: nodeEnv, VolumeMounts: nodeMounts, SecurityContext: hostProcessContext(),
	}
	pod := corev1.PodSpec{
		ServiceAccountName: calicoNodeSA, HostNetwork: true, TerminationGracePeriodSeconds: ptr.To[int64](5),
		// The operator's (pkg/render/common/meta/meta.go TolerateAll).
		Tolerations: []corev1.Toleration{
			{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
			{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists},
			{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
		},
		InitContainers: []corev1.Container{uninstall, install},
		Containers:     []corev1.Container{felix, node},
		Volumes: []corev1.Volume{
			hostVol("var-run-calico", "/var/run/calico", dirOrCreate),
			hostVol("var-lib-calico", "/var/lib/calico", dirOrCreate),
			hostVol("cni-bin-dir", "/opt/cni/bin", dirOrCreate),
			hostVol("cni-net-dir", "/etc/cni/net.d", nil),
			hostVol("cni-log-dir", "/var/log/calico/cni", dirOrCreate),
			configMapVolume(calicoStaticRulesName, calicoStaticRulesName),
		},
	}
	cniConfig := b.calicoWindowsCNIConfig()
	ds := daemonSet("calico-node-windows", windowsOSLabel, pod)
	// The Installation's default nodeUpdateStrategy (fillDefaults).
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
	// As the operator does (hash.operator.tigera.io/cni-config): a
	// changed CNI configuration rolls the pods, whose install-cni
	// writes it.
	sum := sha256.Sum256([]byte(cniConfig.Data["config"]))
	ds.Spec.Template.Annotations = map[string]string{"hash.operator.tigera.io/cni-config": hex.EncodeToString(sum[:20])}
	return []runtime.Object{cniConfig, calicoStaticRules(), ds}
}
