package flavors

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// Sentinels stand in for clusterctl variables while the flavor is built
// from typed objects, then become ${VARIABLE} in the text. They are chosen
// to pass the builder's checks and to occur nowhere else.
const (
	sentinelName       = "wkclustersentinel"
	sentinelVersion    = "v1.99.77"
	sentinelLocation   = "wklocationsentinel"
	sentinelSub        = "wksubscriptionsentinel"
	sentinelKey        = "ssh-ed25519 WKSSHKEYSENTINEL"
	sentinelCPSize     = "Standard_WKCPSENTINEL"
	sentinelNodeSize   = "Standard_WKNODESENTINEL"
	sentinelCPAVersion = "v1.99.0-wkcpasentinel"
	// sentinelCPARepository stands for the cloud provider's image
	// repository, which depends on the Kubernetes minor as the chart picks
	// it: a template cannot compute it from ${KUBERNETES_VERSION}.
	sentinelCPARepository = "wkcparepositorysentinel.example/kubernetes"
	sentinelFlannel       = "wkflannelsentinel.example/flannel:windows"
	sentinelProxy         = "wkproxysentinel.example/kube-proxy:windows"
	sentinelMetrics       = "wkmetricssentinel"
	sentinelAzureDisk     = "wkazurediskcsisentinel"
	sentinelCP            = 771
	sentinelLinux         = 772
	sentinelWindows       = 773
	sentinelTypha         = 774
)

// Template renders a flavor as a clusterctl template: ${VARIABLE}
// placeholders, no namespace (clusterctl sets it), and the list of variables.
// Image tags derived from the Kubernetes version use envsubst's
// ${KUBERNETES_VERSION/+/_}, since '+' cannot appear in an image tag. The
// WindowsHostProcessContainers feature gate (Kubernetes 1.22 to 1.25 only)
// cannot be expressed by a variable: templates target 1.26 and newer.
// The metrics-server add-on is the optional variable METRICS_SERVER
// (default disabled; enabled selects its ClusterResourceSet), the Azure
// Disk CSI driver the optional variable AZUREDISK_CSI (default false;
// true selects its ClusterResourceSet), and the Calico flavors' Typha
// replicas the optional CALICO_TYPHA_REPLICAS (default 1, the manifest's).
func Template(s *runtime.Scheme, flavor string, windowsVersion string, windowsTaint bool) ([]byte, []string, error) {
	o := Options{
		ClusterName: sentinelName, Namespace: "wknamespacesentinel", KubernetesVersion: sentinelVersion,
		Location: sentinelLocation, SubscriptionID: sentinelSub, SSHPublicKey: sentinelKey,
		ControlPlaneVMSize: sentinelCPSize, NodeVMSize: sentinelNodeSize,
		ControlPlaneNodes: sentinelCP, LinuxNodes: sentinelLinux, WindowsNodes: sentinelWindows, CalicoTyphaReplicas: sentinelTypha,
		WindowsTaint: windowsTaint, versionIsVariable: true,
		FlannelWindowsImage: sentinelFlannel, KubeProxyWindowsImage: sentinelProxy,
		// The add-on's ClusterResourceSet is in every template; the
		// Cluster's label selects it only with METRICS_SERVER=enabled.
		MetricsServer: true, metricsServerLabel: sentinelMetrics,
		AzureDiskCSI: true, azureDiskCSILabel: sentinelAzureDisk,
	}
	if windowsVersion != "" {
		o.WindowsVersion = windowsVersionOf(windowsVersion)
	}
	objs, err := Generate(flavor, o)
	if err != nil {
		return nil, nil, err
	}
	data, err := YAML(s, objs)
	if err != nil {
		return nil, nil, err
	}
	text := string(data)
	var kept []string
	for _, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) != "namespace: wknamespacesentinel" {
			kept = append(kept, line)
		}
	}
	text = strings.Join(kept, "\n")
	vars := map[string]bool{}
	replace := func(old, variable, expr string) {
		if strings.Contains(text, old) {
			text = strings.ReplaceAll(text, old, expr)
			vars[variable] = true
		}
	}
	replace(sentinelFlannel, "FLANNEL_WINDOWS_IMAGE", "${FLANNEL_WINDOWS_IMAGE}")
	replace(sentinelProxy, "KUBE_PROXY_WINDOWS_IMAGE", "${KUBE_PROXY_WINDOWS_IMAGE}")
	// clusterctl's ${VAR:=default}: an optional variable, off unless set.
	replace(sentinelMetrics, "METRICS_SERVER", "${METRICS_SERVER:="+metricsServerDisabled+"}")
	// Quoted: the values true and false would otherwise be YAML booleans,
	// which a label cannot be.
	replace(sentinelAzureDisk, "AZUREDISK_CSI", `"${AZUREDISK_CSI:=`+azureDiskCSIDisabled+`}"`)
	replace(sentinelCPAVersion, "CLOUD_PROVIDER_AZURE_VERSION", "${CLOUD_PROVIDER_AZURE_VERSION}")
	// The chart's repository for 1.32 and later by default; older
	// Kubernetes sets mcr.microsoft.com/oss/kubernetes.
	replace(sentinelCPARepository, "CLOUD_PROVIDER_AZURE_REPOSITORY", "${CLOUD_PROVIDER_AZURE_REPOSITORY:="+cloudProviderAzureRepositoryV2+"}")
	replace(sentinelVersion+"-", "KUBERNETES_VERSION", "${KUBERNETES_VERSION/+/_}-")
	replace(sentinelVersion, "KUBERNETES_VERSION", "${KUBERNETES_VERSION}")
	replace(sentinelName, "CLUSTER_NAME", "${CLUSTER_NAME}")
	replace(sentinelLocation, "AZURE_LOCATION", "${AZURE_LOCATION}")
	replace(sentinelSub, "AZURE_SUBSCRIPTION_ID", "${AZURE_SUBSCRIPTION_ID}")
	replace(base64.StdEncoding.EncodeToString([]byte(sentinelKey)), "AZURE_SSH_PUBLIC_KEY_B64", "${AZURE_SSH_PUBLIC_KEY_B64}")
	replace(sentinelKey, "AZURE_SSH_PUBLIC_KEY", "${AZURE_SSH_PUBLIC_KEY}")
	replace(sentinelCPSize, "AZURE_CONTROL_PLANE_MACHINE_TYPE", "${AZURE_CONTROL_PLANE_MACHINE_TYPE}")
	replace(sentinelNodeSize, "AZURE_NODE_MACHINE_TYPE", "${AZURE_NODE_MACHINE_TYPE}")
	replace("replicas: 771", "CONTROL_PLANE_MACHINE_COUNT", "replicas: ${CONTROL_PLANE_MACHINE_COUNT}")
	replace("replicas: 772", "WORKER_MACHINE_COUNT", "replicas: ${WORKER_MACHINE_COUNT}")
	replace("replicas: 773", "WINDOWS_WORKER_MACHINE_COUNT", "replicas: ${WINDOWS_WORKER_MACHINE_COUNT}")
	replace("replicas: 774", "CALICO_TYPHA_REPLICAS", "replicas: ${CALICO_TYPHA_REPLICAS:="+fmt.Sprint(DefaultTyphaReplicas)+"}")
	var names []string
	for v := range vars {
		names = append(names, v)
	}
	sort.Strings(names)
	return []byte(text), names, nil
}
