package flavors

import (
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

const (
	calicoVersion   = "v3.30.7"
	flannelVersion  = "v0.25.6"
	csiProxyVersion = "v1.1.3"
	addonNamespace  = "kube-system"
	windowsOSLabel  = "windows"
	linuxOSLabel    = "linux"
	systemNodeCrit  = "system-node-critical"
	hostProcessUser = `NT AUTHORITY\system`
	kubeProxyImage  = "docker.io/sigwindowstools/kube-proxy"
	calicoNodeWin   = "docker.io/calico/node-windows"
	calicoCNIWin    = "docker.io/calico/cni-windows"
	calicoNodeLinux = "docker.io/calico/node"
	flannelLinuxImg = "docker.io/flannel/flannel"
	// flannelCNIPlugin is the flannel CNI plugin binary that
	// kube-flannel.yml's install-cni-plugin copies to the host.
	flannelCNIPlugin        = "docker.io/flannel/flannel-cni-plugin"
	flannelCNIPluginVersion = "v1.5.1-flannel2"
	csiProxyImage           = "ghcr.io/kubernetes-sigs/sig-windows/csi-proxy"
	flannelWindowsConfig    = "kube-flannel-windows-cfg"
	// FlannelWindowsCNIKey is the key of the Windows CNI configuration
	// the last upstream flannel start.ps1 read, from
	// /mounts/kube-flannel-windows/ (sig-windows-tools
	// hostprocess/flannel/flanneld/start.ps1 before 729ae7cd, 03f99247).
	FlannelWindowsCNIKey = "cni-conf-containerd.json"
)

func (b *builder) addons() []client.Object {
	var objs []client.Object
	linux := b.linuxCNI()
	cms := []*corev1.ConfigMap{b.configMap(b.cni.name+"-linux", linux...)}
	if b.cni.name == "calico" {
		cms = append(b.calicoCRDConfigMaps(), cms...)
		// Calico's own objects, in a ConfigMap applied after the CRDs.
		cms = append(cms, b.configMap("calico-resources", b.calicoResources()...))
	}
	objs = append(objs, b.crs(b.o.ClusterName+"-"+b.cni.name, map[string]string{"cni": b.cni.name}, cms...)...)
	objs = append(objs, b.crs(b.o.ClusterName+"-cloud-provider-azure", map[string]string{CloudProviderLabel: CloudProviderAzure}, b.configMap("cloud-provider-azure", b.cloudProviderAzure()...))...)
	if !b.windows {
		return objs
	}
	windowsCNI := b.crs(b.o.ClusterName+"-"+b.cni.name+"-windows", map[string]string{"cni-windows": b.cni.name}, b.configMap(b.cni.name+"-windows", b.windowsCNI()...))
	// The API server's address, which the provider publishes once its
	// load balancer has one: the set applies when it exists.
	set := windowsCNI[0].(*addonsv1.ClusterResourceSet)
	set.Spec.Resources = append(set.Spec.Resources, addonsv1.ResourceRef{Kind: "ConfigMap", Name: b.o.ClusterName + infrav1.ServicesEndpointSuffix})
	objs = append(objs, windowsCNI...)
	objs = append(objs, b.crs(b.o.ClusterName+"-kube-proxy-windows", map[string]string{"windows": "enabled"}, b.configMap("kube-proxy-windows", b.kubeProxyWindows()))...)
	objs = append(objs, b.crs(b.o.ClusterName+"-csi-proxy", map[string]string{"csi-proxy": "enabled"}, b.configMap("csi-proxy", b.csiProxy()))...)
	return objs
}

// configMap holds add-on objects as one YAML stream, the form a
// ClusterResourceSet applies to the workload cluster.
func (b *builder) configMap(name string, objs ...runtime.Object) *corev1.ConfigMap {
	var docs []string
	for _, o := range objs {
		docs = append(docs, string(mustYAML(o)))
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: b.o.ClusterName + "-" + name, Namespace: b.o.Namespace},
		Data:       map[string]string{name + ".yaml": strings.Join(docs, "---\n")},
	}
}

func mustYAML(o runtime.Object) []byte {
	gvk := o.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		panic(fmt.Sprintf("add-on object %T has no kind set", o))
	}
	data, err := manifestYAML(o)
	if err != nil {
		panic(err)
	}
	return data
}

// tolerations: Windows add-ons tolerate everything, as node-critical
// DaemonSets must run on nodes that are still tainted.
func tolerateAll() []corev1.Toleration {
	return []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
}

func daemonSet(name, os string, pod corev1.PodSpec) *appsv1.DaemonSet {
	labels := map[string]string{"k8s-app": name}
	pod.NodeSelector = map[string]string{corev1.LabelOSStable: os}
	if pod.PriorityClassName == "" {
		pod.PriorityClassName = systemNodeCrit
	}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: addonNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}

// hostProcess makes a Windows pod a HostProcess pod: it runs on the host as
// SYSTEM with the host's network, which kube-proxy and the CNI need.
func hostProcess(pod *corev1.PodSpec) {
	pod.HostNetwork = true
	pod.SecurityContext = &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{
		HostProcess: ptr.To(true), RunAsUserName: ptr.To(hostProcessUser),
	}}
	pod.Tolerations = tolerateAll()
}

func env(kv ...string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

func nodeNameEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}
}

// kubeProxyWindows is kube-proxy as a HostProcess DaemonSet, as CAPZ's
// Windows CI template has it (templates/addons/windows/calico/
// kube-proxy-windows.yaml, 69ec3a40): the image's PowerShell entrypoint
// runs start.ps1, which loads .\hns.psm1 from the working directory,
// waits for Calico's HNS network and runs kube-proxy with the kubeconfig
// of kubeadm's kube-proxy ConfigMap. The variable is NODENAME, which
// start.ps1 reads (sig-windows-tools hostprocess/calico/kube-proxy/
// kube-proxy.yml, 47ab892d); CAPZ's template sets NODE_NAME, which
// start.ps1 never reads.
func (b *builder) kubeProxyWindows() *appsv1.DaemonSet {
	image := fmt.Sprintf("%s:%s-calico-hostprocess", kubeProxyImage, imageTag(b.o.KubernetesVersion))
	if b.cni.name == "flannel" {
		image = b.o.KubeProxyWindowsImage
	}
	pod := corev1.PodSpec{
		ServiceAccountName: "kube-proxy",
		Containers: []corev1.Container{{
			Name: "kube-proxy", Image: image,
			Args:         []string{windowsSandbox + "/kube-proxy/start.ps1"},
			WorkingDir:   windowsSandbox + "/kube-proxy/",
			Env:          []corev1.EnvVar{fieldEnv("NODENAME", "spec.nodeName"), fieldEnv("POD_IP", "status.podIP")},
			VolumeMounts: []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}},
		}},
		// kubeadm's kube-proxy ConfigMap: config.conf and kubeconfig.conf.
		Volumes: []corev1.Volume{configMapVolume("kube-proxy", "kube-proxy")},
	}
	if b.cni.name == "flannel" {
		// The user's image: its own entrypoint, not Calico's start.ps1,
		// with what the last upstream flannel kube-proxy read
		// (sig-windows-tools hostprocess/flannel/kube-proxy/
		// kube-proxy.yml and start.ps1 before 729ae7cd, 03f99247):
		// NODE_NAME, KUBE_NETWORK, CNI_BIN_PATH (host-local for the
		// source VIP) and kubeadm's ConfigMap at /mounts/var/lib/kube-proxy.
		c := &pod.Containers[0]
		c.Args, c.WorkingDir = nil, ""
		c.Env = []corev1.EnvVar{{Name: "KUBE_NETWORK", Value: b.windowsNetworkName()}, {Name: "CNI_BIN_PATH", Value: `C:\opt\cni\bin`},
			fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_IP", "status.podIP")}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/mounts/var/lib/kube-proxy"}}
	}
	hostProcess(&pod)
	pod.Tolerations = append([]corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}}, pod.Tolerations...)
	ds := daemonSet("kube-proxy-windows", windowsOSLabel, pod)
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}
	return ds
}

func (b *builder) windowsNetworkName() string {
	if b.cni.name == "calico" {
		return "Calico.*"
	}
	if b.cni.backend == "host-gw" {
		return "cbr0"
	}
	return "flannel.4096"
}

// outboundNATExceptions: pod-to-pod and pod-to-service traffic must keep its
// source address; only traffic leaving the cluster is NATed to the node.
func (b *builder) outboundNATExceptions() []string {
	return []string{b.cni.podCIDR, ServiceCIDR}
}

func (b *builder) windowsCNI() []runtime.Object {
	if b.cni.name == "calico" {
		return b.calicoWindows()
	}
	return b.flannelWindows()
}

func (b *builder) linuxCNI() []runtime.Object {
	if b.cni.name == "calico" {
		return b.calicoLinux()
	}
	return b.flannelLinux()
}

func jsonString(v any) string {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	return string(out)
}

// serviceAccount is the identity an add-on's pods run as, bound to the
// cluster-wide rules it needs: without it the DaemonSet creates no pod.
func serviceAccount(name string, rules ...rbacv1.PolicyRule) []runtime.Object {
	return []runtime.Object{
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: addonNamespace}},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules},
		&rbacv1.ClusterRoleBinding{
			TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: addonNamespace}},
		},
	}
}

// flannelNetConf is flannel's net-conf.json: VXLAN with VNI 4096 on UDP 4789
// (what Windows requires), or host-gw where routes can be programmed.
func (b *builder) flannelNetConf() string {
	backend := map[string]any{"Type": "vxlan", "VNI": VXLANVNI, "Port": VXLANPort}
	if b.cni.backend == "host-gw" {
		backend = map[string]any{"Type": "host-gw"}
	}
	return jsonString(map[string]any{"Network": b.cni.podCIDR, "Backend": backend})
}

func (b *builder) flannelConfig(name string, cniConf map[string]any) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: addonNamespace, Labels: map[string]string{"app": "flannel"}},
		Data:       map[string]string{"net-conf.json": b.flannelNetConf(), "cni-conf.json": jsonString(cniConf)},
	}
}

func (b *builder) flannelLinux() []runtime.Object {
	config := b.flannelConfig("kube-flannel-cfg", map[string]any{
		"name": "cbr0", "cniVersion": "0.3.1",
		"plugins": []any{map[string]any{"type": "flannel", "delegate": map[string]any{"hairpinMode": true, "isDefaultGateway": true}}, map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}}},
	})
	cfgMount := corev1.VolumeMount{Name: "flannel-cfg", MountPath: "/etc/kube-flannel/"}
	pod := corev1.PodSpec{
		ServiceAccountName: "flannel", HostNetwork: true, Tolerations: tolerateAll(),
		InitContainers: []corev1.Container{{
			Name: "install-cni-plugin", Image: flannelCNIPlugin + ":" + flannelCNIPluginVersion,
			Command: []string{"cp"}, Args: []string{"-f", "/flannel", "/opt/cni/bin/flannel"},
			VolumeMounts: []corev1.VolumeMount{{Name: "cni-plugin", MountPath: "/opt/cni/bin"}},
		}, {
			Name: "install-cni", Image: flannelLinuxImg + ":" + flannelVersion,
			Command: []string{"cp"}, Args: []string{"-f", "/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"},
			VolumeMounts: []corev1.VolumeMount{{Name: "cni", MountPath: "/etc/cni/net.d"}, cfgMount},
		}},
		Containers: []corev1.Container{{
			Name: "kube-flannel", Image: flannelLinuxImg + ":" + flannelVersion,
			Command: []string{"/opt/bin/flanneld", "--ip-masq", "--kube-subnet-mgr"},
			Env: []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"),
				{Name: "EVENT_QUEUE_DEPTH", Value: "5000"}},
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(false), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}},
			VolumeMounts:    []corev1.VolumeMount{{Name: "run", MountPath: "/run/flannel"}, cfgMount, {Name: "xtables-lock", MountPath: "/run/xtables.lock"}},
		}},
		Volumes: []corev1.Volume{
			hostPathVolume("run", "/run/flannel"),
			hostPathVolume("cni-plugin", "/opt/cni/bin"),
			hostPathVolume("cni", "/etc/cni/net.d"),
			configMapVolume("flannel-cfg", config.Name),
			{Name: "xtables-lock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/xtables.lock", Type: ptr.To(corev1.HostPathFileOrCreate)}}},
		},
	}
	objs := serviceAccount("flannel",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	)
	return append(objs, config, daemonSet("kube-flannel-ds", linuxOSLabel, pod))
}

// flannelWindows is flannel on Windows as a HostProcess DaemonSet of the
// user's image: no flannel image for Windows is published today
// (sig-windows-tools removed its HostProcess flannel in 729ae7cd,
// 2025-04-11, and never published v0.21.5-hostprocess), so the flavor
// takes the image the user builds. The image's own entrypoint runs (the
// removed sig-windows-tools image ran start.ps1, which installs flanneld,
// the flannel and sdnoverlay/sdnbridge CNI plugins into C:\opt\cni\bin
// and writes the CNI configuration with the node's ProviderAddress); the
// ConfigMaps are mounted where that start.ps1 read them.
func (b *builder) flannelWindows() []runtime.Object {
	delegate := map[string]any{"type": "sdnoverlay", "AdditionalArgs": []any{
		map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "OutBoundNAT", "Settings": map[string]any{"Exceptions": b.outboundNATExceptions()}}},
		map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "SDNROUTE", "Settings": map[string]any{"DestinationPrefix": ServiceCIDR, "NeedEncap": true}}},
		map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "ProviderAddress", "Settings": map[string]any{"ProviderAddress": ""}}},
	}}
	if b.cni.backend == "host-gw" {
		delegate = map[string]any{"type": "sdnbridge", "AdditionalArgs": []any{
			map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "OutBoundNAT", "Settings": map[string]any{"Exceptions": b.outboundNATExceptions()}}},
			map[string]any{"Name": "EndpointPolicy", "Value": map[string]any{"Type": "SDNROUTE", "Settings": map[string]any{"DestinationPrefix": ServiceCIDR, "NeedEncap": true}}},
		}}
	}
	config := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: flannelWindowsConfig, Namespace: addonNamespace, Labels: map[string]string{"app": "flannel"}},
		Data: map[string]string{FlannelWindowsCNIKey: jsonString(map[string]any{"name": b.windowsNetworkName(), "cniVersion": "0.3.0", "type": "flannel",
			"capabilities": map[string]any{"portMappings": true, "dns": true}, "delegate": delegate})},
	}
	pod := corev1.PodSpec{
		ServiceAccountName: "flannel",
		Containers: []corev1.Container{{
			Name: "kube-flannel", Image: b.o.FlannelWindowsImage,
			Env: append([]corev1.EnvVar{nodeNameEnv(), fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"),
				{Name: "KUBE_NETWORK", Value: b.windowsNetworkName()}, {Name: "SERVICE_SUBNET", Value: ServiceCIDR}, {Name: "CNI_BIN_PATH", Value: `C:\opt\cni\bin`}, {Name: "CNI_CONFIG_PATH", Value: `C:\etc\cni\net.d`}},
				// flanneld on Windows cannot reach the API server
				// through the kubernetes Service (flannel-io/flannel#1772):
				// the address the provider publishes, as the upstream
				// manifest overrode it.
				servicesEndpointEnv()...),
			VolumeMounts: []corev1.VolumeMount{{Name: "flannel-cfg", MountPath: "/mounts/kube-flannel/"}, {Name: "flannel-windows-cfg", MountPath: "/mounts/kube-flannel-windows/"}},
		}},
		// net-conf.json from the Linux nodes' kube-flannel-cfg, the
		// CNI configuration from the Windows one.
		Volumes: []corev1.Volume{configMapVolume("flannel-cfg", "kube-flannel-cfg"), configMapVolume("flannel-windows-cfg", config.Name)},
	}
	hostProcess(&pod)
	return []runtime.Object{config, daemonSet("kube-flannel-ds-windows", windowsOSLabel, pod)}
}

// csiProxy lets Windows CSI node plugins, which cannot be privileged, manage
// the host's disks and volumes.
func (b *builder) csiProxy() *appsv1.DaemonSet {
	pod := corev1.PodSpec{Containers: []corev1.Container{{Name: "csi-proxy", Image: csiProxyImage + ":" + csiProxyVersion}}}
	hostProcess(&pod)
	return daemonSet("csi-proxy", windowsOSLabel, pod)
}
