package flavors

import (
	"encoding/base64"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
)

// Networking numbers of the seeds.
const (
	// VXLANVNI and VXLANPort are what Windows overlay networking needs:
	// HNS accepts VNI 4096 (and above) only, on the standard UDP port.
	VXLANVNI  = 4096
	VXLANPort = 4789
	// AzureMTU is the VNet's MTU, which Linux nodes set on eth0 so that
	// traffic to Windows nodes is not fragmented; the overlay loses 50
	// bytes to VXLAN.
	AzureMTU   = 1400
	OverlayMTU = AzureMTU - 50

	CalicoPodCIDR  = "192.168.0.0/16"
	FlannelPodCIDR = "10.244.0.0/16"
	ServiceCIDR    = "10.96.0.0/12"

	// ContainerdSocket is the Windows kubelet's CRI endpoint.
	ContainerdSocket = "npipe:////./pipe/containerd-containerd"
	// NodeNameFromMetadata makes the node's name the VM's computer name.
	NodeNameFromMetadata = `{{ ds.meta_data["local_hostname"] }}`
	uninitializedTaint   = "node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule"
	windowsTaint         = "os=windows:NoSchedule"
)

// cni says which CNI a flavor uses, and how.
type cni struct {
	name    string // calico or flannel
	backend string // vxlan or host-gw
	podCIDR string
}

func cniOf(flavor string) cni {
	switch flavor {
	case WindowsFlannel:
		return cni{"flannel", "vxlan", FlannelPodCIDR}
	case WindowsHostGW:
		return cni{"flannel", "host-gw", FlannelPodCIDR}
	default:
		return cni{"calico", "vxlan", CalicoPodCIDR}
	}
}

// Generate builds a flavor's objects, or says why it cannot.
func Generate(flavor string, o Options) ([]client.Object, error) {
	o.Defaults()
	v, err := check(flavor, o)
	if err != nil {
		return nil, err
	}
	if err := cloudProviderSupported(o.KubernetesVersion, v.Minor); err != nil {
		return nil, err
	}
	b := &builder{o: o, v: v, flavor: flavor, cni: cniOf(flavor), windows: flavor != Default}
	return b.build(), nil
}

type builder struct {
	o       Options
	v       images.Version
	flavor  string
	cni     cni
	windows bool
}

func (b *builder) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: b.o.Namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: b.o.ClusterName}}
}

func ref(group, kind, name string) clusterv1.ContractVersionedObjectReference {
	return clusterv1.ContractVersionedObjectReference{APIGroup: group, Kind: kind, Name: name}
}

func args(kv ...string) []bootstrapv1.Arg {
	var out []bootstrapv1.Arg
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, bootstrapv1.Arg{Name: kv[i], Value: ptr.To(kv[i+1])})
	}
	return out
}

func (b *builder) build() []client.Object {
	o, name := b.o, b.o.ClusterName
	clusterLabels := map[string]string{clusterv1.ClusterNameLabel: name, "cni": b.cni.name, CloudProviderLabel: CloudProviderAzure}
	if b.windows {
		clusterLabels["windows"] = "enabled"
		clusterLabels["cni-windows"] = b.cni.name
		clusterLabels["csi-proxy"] = "enabled"
	}
	if !o.NoAdmission {
		clusterLabels[AdmissionLabel] = admissionEnabled
	}
	if o.MetricsServer {
		clusterLabels[MetricsServerLabel] = metricsServerEnabled
		if o.metricsServerLabel != "" {
			clusterLabels[MetricsServerLabel] = o.metricsServerLabel
		}
	}
	if o.AzureDiskCSI {
		clusterLabels[AzureDiskCSILabel] = azureDiskCSIEnabled
		if o.azureDiskCSILabel != "" {
			clusterLabels[AzureDiskCSILabel] = o.azureDiskCSILabel
		}
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: clusterLabels},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{b.cni.podCIDR}},
				Services: clusterv1.NetworkRanges{CIDRBlocks: []string{ServiceCIDR}},
			},
			ControlPlaneRef:   ref(controlplanev1.GroupVersion.Group, "KubeadmControlPlane", name+"-control-plane"),
			InfrastructureRef: ref(infrav1.GroupVersion.Group, "AzureCluster", name),
		},
	}
	azureCluster := &infrav1.AzureCluster{
		ObjectMeta: b.meta(name),
		Spec:       infrav1.AzureClusterSpec{SubscriptionID: o.SubscriptionID, Location: o.Location, ResourceGroup: name},
	}
	if o.IdentityName != "" {
		azureCluster.Spec.IdentityRef = &infrav1.IdentityReference{Name: o.IdentityName}
	}
	objs := []client.Object{cluster, azureCluster}
	objs = append(objs, b.controlPlane()...)
	if o.LinuxNodes > 0 || !b.windows {
		objs = append(objs, b.linuxWorkers()...)
	}
	if b.windows {
		objs = append(objs, b.windowsWorkers()...)
	}
	objs = append(objs, b.addons()...)
	objs = append(objs, b.admission()...)
	objs = append(objs, b.metricsServer()...)
	objs = append(objs, b.azureDiskCSI()...)
	return objs
}

func (b *builder) sshKeyB64() string {
	return base64.StdEncoding.EncodeToString([]byte(b.o.SSHPublicKey))
}

func (b *builder) linuxTemplate(name, size string) *infrav1.AzureMachineTemplate {
	return &infrav1.AzureMachineTemplate{ObjectMeta: b.meta(name), Spec: infrav1.AzureMachineTemplateSpec{Template: infrav1.AzureMachineTemplateResource{
		Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{
			VMSize: size, OSDisk: infrav1.OSDisk{OSType: infrav1.Linux, DiskSizeGB: ptr.To[int32](128)}, SSHPublicKey: b.sshKeyB64(),
			EnableIPForwarding: b.routed(), Identity: b.vmIdentity(),
		}},
	}}}
}

// vmIdentity is the machines' managed identity: the one their cloud
// provider authenticates with when the cluster has no AzureClusterIdentity
// (azure.json then says useManagedIdentityExtension, by CAPZ's rule). A
// system-assigned identity needs nothing made beforehand; winkube grants
// it Contributor on the cluster's resource group, for which the manager's
// principal needs User Access Administrator or Owner. CAPZ's Windows
// template gives its control plane and Windows workers an identity too,
// a user-assigned one its CI makes beforehand
// (templates/cluster-template-windows.yaml, commit 69ec3a4).
func (b *builder) vmIdentity() infrav1.VMIdentity {
	if b.o.IdentityName != "" {
		return "" // the webhooks' default, None
	}
	return infrav1.VMIdentitySystemAssigned
}

// linuxPreKubeadm keeps pods from Azure's wireserver and, on Linux nodes
// of flannel clusters, sets the Azure MTU so that flannel derives the
// 1350-byte overlay from it. The wireserver rules drop only forwarded
// (pod) traffic, so the node's own agent still reaches it and no
// NetworkPolicy is bypassed: AKS's rules (Azure/AgentBaker
// parts/linux/cloud-init/artifacts/block_wireserver.sh, a1f3b9b9).
func (b *builder) linuxPreKubeadm() []string {
	cmds := []string{
		"iptables -I FORWARD -d 168.63.129.16 -p tcp --dport 80 -j DROP",
		"iptables -I FORWARD -d 168.63.129.16 -p tcp --dport 32526 -j DROP",
	}
	if b.cni.name != "flannel" {
		return cmds
	}
	return append(cmds, fmt.Sprintf("ip link set dev eth0 mtu %d", AzureMTU))
}

func (b *builder) users() []bootstrapv1.User {
	return []bootstrapv1.User{{Name: "capi", Sudo: "ALL=(ALL) NOPASSWD:ALL", SSHAuthorizedKeys: []string{b.o.SSHPublicKey}}}
}

func (b *builder) linuxKubelet() []bootstrapv1.Arg {
	return args("cloud-provider", "external")
}

// controllerManagerArgs lifts kube-controller-manager's client limits from
// its defaults (20 requests/s, bursts of 30) to those Kubernetes' own
// 5,000-node scale tests run it with. At the defaults the DaemonSet
// controller alone, creating a CNI, kube-proxy and cloud-node-manager pod
// for each new node, needs minutes to place them on a few hundred nodes
// joining at once, and the node IPAM and TTL controllers queue behind it;
// the API server's priority and fairness, not the client, then decides
// what waits.
func controllerManagerArgs() []bootstrapv1.Arg {
	return args("kube-api-qps", "100", "kube-api-burst", "100")
}

func (b *builder) controlPlane() []client.Object {
	o, name := b.o, b.o.ClusterName
	// The API server needs no cloud-provider flag (gone from it since the
	// in-tree providers were removed); only kubelets run with "external".
	var apiServerArgs []bootstrapv1.Arg
	if b.windows && images.NeedsHostProcessFeatureGate(b.v) {
		apiServerArgs = append(apiServerArgs, args("feature-gates", "WindowsHostProcessContainers=true")...)
	}
	nodeReg := bootstrapv1.NodeRegistrationOptions{Name: NodeNameFromMetadata, KubeletExtraArgs: b.linuxKubelet()}
	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: b.meta(name + "-control-plane"),
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Replicas: ptr.To(o.ControlPlaneNodes), Version: b.v.String(),
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: ref(infrav1.GroupVersion.Group, "AzureMachineTemplate", name+"-control-plane"),
			}},
			KubeadmConfigSpec: bootstrapv1.KubeadmConfigSpec{
				ClusterConfiguration: bootstrapv1.ClusterConfiguration{
					APIServer:         bootstrapv1.APIServer{ExtraArgs: apiServerArgs},
					ControllerManager: bootstrapv1.ControllerManager{ExtraArgs: controllerManagerArgs()},
				},
				InitConfiguration:  bootstrapv1.InitConfiguration{NodeRegistration: nodeReg},
				JoinConfiguration:  bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg},
				Users:              b.users(),
				PreKubeadmCommands: b.linuxPreKubeadm(),
				Files:              []bootstrapv1.File{azureJSONFile(name+"-control-plane", ControlPlaneAzureJSON, LinuxAzureJSONPath)},
			},
		},
	}
	return []client.Object{kcp, b.linuxTemplate(name+"-control-plane", o.ControlPlaneVMSize)}
}

func (b *builder) linuxWorkers() []client.Object {
	o, name := b.o, b.o.ClusterName+"-md-0"
	cfg := &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: b.meta(name), Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
		Spec: bootstrapv1.KubeadmConfigSpec{
			JoinConfiguration:  bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: NodeNameFromMetadata, KubeletExtraArgs: b.linuxKubelet()}},
			Users:              b.users(),
			PreKubeadmCommands: b.linuxPreKubeadm(),
			Files:              []bootstrapv1.File{azureJSONFile(name, WorkerNodeAzureJSON, LinuxAzureJSONPath)},
		},
	}}}
	replicas := o.LinuxNodes
	if !b.windows && replicas == 0 {
		replicas = 1
	}
	md := b.machineDeployment(name, replicas, "AzureMachineTemplate", name)
	return []client.Object{md, b.linuxTemplate(name, o.NodeVMSize), cfg}
}

func (b *builder) machineDeployment(name string, replicas int32, infraKind, infraName string) *clusterv1.MachineDeployment {
	selector := map[string]string{clusterv1.ClusterNameLabel: b.o.ClusterName, clusterv1.MachineDeploymentNameLabel: name}
	return &clusterv1.MachineDeployment{
		ObjectMeta: b.meta(name),
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: b.o.ClusterName, Replicas: ptr.To(replicas),
			Selector: metav1.LabelSelector{MatchLabels: selector},
			// Cluster API's defaulting webhook would set this; spelled out
			// so the objects are complete without it. One new machine at a
			// time, none removed before its replacement runs.
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				},
			}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: selector},
				Spec: clusterv1.MachineSpec{
					ClusterName: b.o.ClusterName, Version: b.v.String(),
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: ref(bootstrapv1.GroupVersion.Group, "KubeadmConfigTemplate", name)},
					InfrastructureRef: ref(infrav1.GroupVersion.Group, infraKind, infraName),
				},
			},
		},
	}
}

// windowsConfig is the kubeadm configuration of a Windows node: cloudbase-init
// runs it; containerd on its named pipe; the kubelet as the seeds set it.
func (b *builder) windowsConfig(infraName string) bootstrapv1.KubeadmConfigSpec {
	taints := uninitializedTaint
	if b.o.WindowsTaint {
		taints += "," + windowsTaint
	}
	kubelet := args("cloud-provider", "external", "register-with-taints", taints, "windows-priorityclass", "ABOVE_NORMAL_PRIORITY_CLASS")
	if images.NeedsHostProcessFeatureGate(b.v) {
		kubelet = append(kubelet, args("feature-gates", "WindowsHostProcessContainers=true")...)
	}
	return bootstrapv1.KubeadmConfigSpec{
		JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
			Name: NodeNameFromMetadata, CRISocket: ContainerdSocket, KubeletExtraArgs: kubelet,
		}},
		Users: []bootstrapv1.User{{Name: "capi", Groups: "Administrators", SSHAuthorizedKeys: []string{b.o.SSHPublicKey}}},
		PreKubeadmCommands: []string{
			// Defender scanning the CNI's binaries and their files slows
			// every pod start; CAPZ's images exclude them the same way.
			`powershell -c "Add-MpPreference -ExclusionProcess C:/opt/cni/bin/calico.exe,C:/opt/cni/bin/calico-ipam.exe,C:/opt/cni/bin/flannel.exe,C:/opt/cni/bin/host-local.exe,C:/opt/cni/bin/win-overlay.exe,C:/opt/cni/bin/win-bridge.exe"`,
			`powershell -c "Add-MpPreference -ExclusionPath C:/opt/cni,C:/etc/cni,C:/ProgramData/containerd"`,
		},
		PostKubeadmCommands: []string{`powershell -c "Set-Service -Name kubelet -StartupType Automatic"`},
		Files:               []bootstrapv1.File{azureJSONFile(infraName, WorkerNodeAzureJSON, WindowsAzureJSONPath)},
	}
}

func (b *builder) windowsTemplateSpec() infrav1.AzureVMSpec {
	return infrav1.AzureVMSpec{
		VMSize: b.o.NodeVMSize, OSDisk: infrav1.OSDisk{OSType: infrav1.Windows, DiskSizeGB: ptr.To[int32](128)},
		WindowsServerVersion: b.o.WindowsVersion, ContainerRuntime: infrav1.Containerd, EnableIPForwarding: b.routed(), Identity: b.vmIdentity(),
	}
}

// routed says whether pod addresses travel unencapsulated between nodes,
// routed by the VNet's route table to the node that holds them (host-gw):
// then every NIC must forward (Azure drops traffic for another address
// at a NIC without IP forwarding: "Virtual network traffic routing",
// learn.microsoft.com).
func (b *builder) routed() bool { return b.cni.backend == "host-gw" }

func (b *builder) windowsWorkers() []client.Object {
	o := b.o
	if b.flavor == MachinePoolWindows {
		name := o.ClusterName + "-mp-win"
		cfg := &bootstrapv1.KubeadmConfig{ObjectMeta: b.meta(name), Spec: b.windowsConfig(name)}
		mp := &clusterv1.MachinePool{
			ObjectMeta: b.meta(name),
			Spec: clusterv1.MachinePoolSpec{
				ClusterName: o.ClusterName, Replicas: ptr.To(o.WindowsNodes),
				Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
					ClusterName: o.ClusterName, Version: b.v.String(),
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: ref(bootstrapv1.GroupVersion.Group, "KubeadmConfig", name)},
					InfrastructureRef: ref(infrav1.GroupVersion.Group, "AzureMachinePool", name),
				}},
			},
		}
		amp := &infrav1.AzureMachinePool{ObjectMeta: b.meta(name), Spec: infrav1.AzureMachinePoolSpec{Template: b.windowsTemplateSpec()}}
		return []client.Object{mp, amp, cfg}
	}
	name := o.ClusterName + "-md-win"
	cfg := &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: b.meta(name), Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{Spec: b.windowsConfig(name)}}}
	tmpl := &infrav1.AzureMachineTemplate{ObjectMeta: b.meta(name), Spec: infrav1.AzureMachineTemplateSpec{Template: infrav1.AzureMachineTemplateResource{
		Spec: infrav1.AzureMachineSpec{AzureVMSpec: b.windowsTemplateSpec()},
	}}}
	return []client.Object{b.machineDeployment(name, o.WindowsNodes, "AzureMachineTemplate", name), tmpl, cfg}
}

// crs delivers ConfigMaps to the clusters whose labels match.
func (b *builder) crs(name string, selector map[string]string, configMaps ...*corev1.ConfigMap) []client.Object {
	set := &addonsv1.ClusterResourceSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.o.Namespace},
		Spec:       addonsv1.ClusterResourceSetSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: selector}, Strategy: "Reconcile"},
	}
	objs := []client.Object{set}
	for _, cm := range configMaps {
		set.Spec.Resources = append(set.Spec.Resources, addonsv1.ResourceRef{Kind: "ConfigMap", Name: cm.Name})
		objs = append(objs, cm)
	}
	return objs
}

// imageTag is a Kubernetes version as an image tag: '+' (build metadata) is
// not allowed in tags, so it becomes '_', as the sig-windows images do.
func imageTag(version string) string { return strings.ReplaceAll(version, "+", "_") }
