// Package flavors builds cluster definitions ("flavors", as clusterctl calls
// its templates) as typed Cluster API, winkube and Kubernetes objects: a
// Linux control plane, Linux and Windows workers, and the Windows add-ons
// (CNI and kube-proxy as HostProcess DaemonSets) delivered by
// ClusterResourceSets. The numbers that make a mixed cluster work (VXLAN
// VNI 4096 on UDP 4789, MTU 1400 underlay / 1350 overlay, 15-character
// Windows names) are written here once, in code.
package flavors

import (
	"errors"
	"fmt"
	"github.com/winkube/winkube/internal/naming"
	"k8s.io/apimachinery/pkg/util/validation"
	"sort"
	"strings"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
)

// Flavor names.
const (
	Default            = "default"
	Windows            = "windows"
	MachinePoolWindows = "machinepool-windows"
	WindowsFlannel     = "windows-flannel"
	WindowsHostGW      = "windows-hostgw"
	// WindowsDockershim is no longer a flavor: check refuses it with
	// DockershimRefused, so a user who still asks for it learns why and
	// what to use.
	WindowsDockershim = "windows-dockershim"
)

// Names lists the flavors.
func Names() []string {
	return []string{Default, Windows, MachinePoolWindows, WindowsFlannel, WindowsHostGW}
}

// DockershimRefused says why the windows-dockershim flavor is refused and
// what to use instead. Its add-ons (the CNI and kube-proxy for Windows) can
// only be HostProcess pods today, and Docker cannot run HostProcess containers
// (kubernetes-sigs/sig-windows-tools hostprocess/README.md); the Docker-era
// form (rancher/wins and sigwindowstools' -nanoserver images, as CAPZ's
// dockershim templates used before 80a6ddb1e) has no tag winkube can show to
// be published for the versions it would need. And the kubelet lost dockershim
// in Kubernetes v1.24 (kubernetes/kubernetes#97252, KEP-2221, CHANGELOG-1.24),
// so no supported release runs it.
const DockershimRefused = "--flavor windows-dockershim is not supported: its Windows add-ons (the CNI and kube-proxy) run as HostProcess pods, " +
	"which Docker cannot run (kubernetes-sigs/sig-windows-tools hostprocess/README.md: \"Docker does not support HostProcess containers\"); " +
	"the kubelet's dockershim was removed in Kubernetes v1.24 (kubernetes/kubernetes#97252, CHANGELOG-1.24.md); and the wins and -nanoserver " +
	"images the Docker path needed cannot be shown to be published. Use --flavor windows (containerd); to move an existing Docker node to " +
	"containerd, replace its machines with ones whose template says containerRuntime: containerd, or follow \"Changing the Container Runtime " +
	"on a Node from Docker Engine to containerd\" (kubernetes.io/docs/tasks/administer-cluster/migrating-from-dockershim/change-runtime-containerd/)"

// Options are the values a flavor is built from.
type Options struct {
	ClusterName       string
	Namespace         string
	KubernetesVersion string
	WindowsVersion    infrav1.WindowsServerVersion
	ControlPlaneNodes int32
	LinuxNodes        int32
	WindowsNodes      int32
	Location          string
	SubscriptionID    string
	// SSHPublicKey is an OpenSSH authorized key (ssh-ed25519 AAAA...), for
	// user capi on every node.
	SSHPublicKey       string
	ControlPlaneVMSize string
	NodeVMSize         string
	// WindowsTaint adds os=windows:NoSchedule to Windows nodes; the Windows
	// add-ons tolerate it.
	WindowsTaint bool
	// FlannelWindowsImage and KubeProxyWindowsImage are the images the
	// flannel flavors run on Windows nodes: none is published (see
	// FlannelImagesMissing), so the user builds and names them.
	FlannelWindowsImage   string
	KubeProxyWindowsImage string
	// IdentityName, when set, is the AzureClusterIdentity (in the
	// cluster's namespace) the AzureCluster acts as.
	IdentityName string

	// versionIsVariable: the version is a clusterctl template's variable,
	// not a release to check.
	versionIsVariable bool
	// NoAdmission leaves out winkube's workload admission (the Cluster label
	// winkube.dev/admission=enabled and its ClusterResourceSet).
	NoAdmission bool
	// MetricsServer adds the metrics-server add-on: its ClusterResourceSet
	// and the Cluster label metrics-server=enabled that selects it.
	MetricsServer bool
	// metricsServerLabel is the Cluster label's value when MetricsServer
	// is set ("enabled"); a clusterctl template makes it a variable.
	metricsServerLabel string
	// AzureDiskCSI adds the Azure Disk CSI driver add-on: its
	// ClusterResourceSet and the Cluster label azuredisk-csi: "true" that
	// selects it, the label CAPZ's HelmChartProxy selects by.
	AzureDiskCSI bool
	// azureDiskCSILabel is the Cluster label's value when AzureDiskCSI is
	// set ("true"); a clusterctl template makes it a variable.
	azureDiskCSILabel string
	// CalicoTyphaReplicas is the calico-typha Deployment's replicas in the
	// Calico flavors (a clusterctl template's CALICO_TYPHA_REPLICAS); 0 is
	// the manifest's DefaultTyphaReplicas. TyphaReplicas gives what the
	// tigera operator would run for a cluster's size.
	CalicoTyphaReplicas int32
}

// Defaults fills what has a sensible default.
func (o *Options) Defaults() {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.WindowsVersion == "" {
		o.WindowsVersion = infrav1.WindowsServer2022
	}
	if o.ControlPlaneNodes == 0 {
		o.ControlPlaneNodes = 1
	}
	if o.CalicoTyphaReplicas == 0 {
		o.CalicoTyphaReplicas = DefaultTyphaReplicas
	}
	if o.ControlPlaneVMSize == "" {
		o.ControlPlaneVMSize = "Standard_D2s_v3"
	}
	if o.NodeVMSize == "" {
		o.NodeVMSize = "Standard_D4s_v3"
	}
}

// Missing lists the required values that are not set, as flag names.
func (o *Options) Missing() []string {
	var m []string
	for flag, v := range map[string]string{"NAME": o.ClusterName, "--kubernetes-version": o.KubernetesVersion, "--location": o.Location,
		"--subscription-id": o.SubscriptionID, "--ssh-public-key": o.SSHPublicKey} {
		if v == "" {
			m = append(m, flag)
		}
	}
	sort.Strings(m)
	return m
}

// check refuses what a flavor cannot build, saying why.
func check(flavor string, o Options) (images.Version, error) {
	if flavor == WindowsDockershim {
		return images.Version{}, errors.New(DockershimRefused)
	}
	if missing := o.Missing(); len(missing) > 0 {
		return images.Version{}, fmt.Errorf("missing required values: %s", strings.Join(missing, ", "))
	}
	if errs := validation.IsDNS1123Label(o.ClusterName); len(errs) > 0 {
		return images.Version{}, fmt.Errorf("cluster NAME %q: %s (Cluster API and clusterctl need a DNS-1123 label, such as demo or team-a-win)", o.ClusterName, strings.Join(errs, "; "))
	}
	if problem := naming.ClusterNameProblem(o.ClusterName); problem != "" {
		return images.Version{}, fmt.Errorf("cluster NAME %q %s", o.ClusterName, problem)
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return images.Version{}, fmt.Errorf("--namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	v, err := images.ParseVersion(o.KubernetesVersion)
	if err != nil {
		return v, fmt.Errorf("--kubernetes-version: %w", err)
	}
	if !o.versionIsVariable {
		if err := images.CheckPublished(v); err != nil {
			return v, fmt.Errorf("--kubernetes-version %s: %w", o.KubernetesVersion, err)
		}
	}
	known := false
	for _, n := range Names() {
		known = known || n == flavor
	}
	if !known {
		return v, fmt.Errorf("--flavor %q is not known: use one of %s", flavor, strings.Join(Names(), ", "))
	}
	if o.ControlPlaneNodes < 1 || o.ControlPlaneNodes%2 == 0 {
		return v, fmt.Errorf("--control-plane-nodes %d: etcd needs an odd number of control-plane nodes (1, 3, 5)", o.ControlPlaneNodes)
	}
	if o.LinuxNodes < 0 {
		return v, fmt.Errorf("--linux-nodes %d: a node count cannot be negative", o.LinuxNodes)
	}
	if o.WindowsNodes < 0 {
		return v, fmt.Errorf("--windows-nodes %d: a node count cannot be negative", o.WindowsNodes)
	}
	if o.CalicoTyphaReplicas < 1 {
		return v, fmt.Errorf("--calico-typha-replicas %d: Felix finds no Typha without one; use 1 or more (TyphaReplicas gives what the tigera operator runs for a cluster's size)", o.CalicoTyphaReplicas)
	}
	if flavor == Default {
		return v, nil
	}
	if err := images.ValidateRuntime(v, infrav1.Windows, o.WindowsVersion, infrav1.Containerd); err != nil {
		var ce *images.CombinationError
		if errors.As(err, &ce) && ce.Field == "windowsServerVersion" {
			return v, fmt.Errorf("--windows-version %s: %w", o.WindowsVersion, err)
		}
		return v, fmt.Errorf("--flavor %s: %w", flavor, err)
	}
	if cniOf(flavor).name == "calico" && !o.versionIsVariable && !v.AtLeast(1, KubeProxyCalicoMinMinor) {
		return v, fmt.Errorf("--flavor %s with Kubernetes %s: %s; use --kubernetes-version v1.%d.0 or later", flavor, v, KubeProxyCalicoUnpublished, KubeProxyCalicoMinMinor)
	}
	if cniOf(flavor).name == "flannel" && !o.versionIsVariable && (o.FlannelWindowsImage == "" || o.KubeProxyWindowsImage == "") {
		return v, fmt.Errorf("--flavor %s: %s", flavor, FlannelImagesMissing)
	}
	return v, nil
}

// KubeProxyCalicoMinMinor is the first Kubernetes minor whose kube-proxy
// for Windows (sigwindowstools/kube-proxy:<version>-calico-hostprocess)
// sig-windows-tools builds: its daily sync workflow pushes every stable
// release from MIN_VERSION="1.33" (.github/workflows/
// sync-kube-proxy-images.yaml, 77474f59); no other workflow publishes
// older tags that winkube can show.
const KubeProxyCalicoMinMinor = 33

// KubeProxyCalicoUnpublished says why an older version is refused.
const KubeProxyCalicoUnpublished = "kube-proxy for Windows, docker.io/sigwindowstools/kube-proxy:<version>-calico-hostprocess, is published only for " +
	"Kubernetes v1.33 and later (kubernetes-sigs/sig-windows-tools .github/workflows/sync-kube-proxy-images.yaml builds from MIN_VERSION 1.33)"

// FlannelImagesMissing says why the flannel flavors need the user's
// images for Windows, and what to do.
const FlannelImagesMissing = "no flannel image for Windows nodes is published: sig-windows-tools removed its HostProcess flannel " +
	"(kubernetes-sigs/sig-windows-tools 729ae7cd, April 2025) and no longer builds kube-proxy's -flannel-hostprocess tags (a95c9b07). " +
	"Build both images (flanneld.exe from flannel's release archive, the flannel and sdnoverlay/sdnbridge CNI plugins, and a start.ps1 " +
	"that installs them into C:\\opt\\cni\\bin and reads /mounts/kube-flannel/net-conf.json and /mounts/kube-flannel-windows/cni-conf-containerd.json, " +
	"as sig-windows-tools' last hostprocess/flannel did; kube-proxy's from /mounts/var/lib/kube-proxy/; see the README), push them to your registry and pass " +
	"--flannel-windows-image and --kube-proxy-windows-image; or use --flavor windows, whose Calico images are published"

func windowsVersionOf(s string) infrav1.WindowsServerVersion { return infrav1.WindowsServerVersion(s) }
