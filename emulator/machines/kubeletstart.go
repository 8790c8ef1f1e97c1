package machines

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/winkube/winkube/emulator/machines/bootdata"
)

// removedKubeletFlags are kubelet flags with the release that removed
// them: a kubelet of that release or later exits on them with pflag's
// "unknown flag" (cmd/kubelet/app/server.go wraps it as "failed to parse
// kubelet flag"). The runtime knows no complete list of the flags a
// kubelet accepts, so a flag it does not list here is taken as known.
var removedKubeletFlags = map[string]string{
	// dockershim's flags went with it (Kubernetes 1.24 release notes).
	"network-plugin": "v1.24.0", "cni-bin-dir": "v1.24.0", "cni-conf-dir": "v1.24.0", "cni-cache-dir": "v1.24.0",
	"network-plugin-mtu": "v1.24.0", "docker-endpoint": "v1.24.0", "image-pull-progress-deadline": "v1.24.0",
	"experimental-dockershim-root-directory": "v1.24.0",
	// --container-runtime (Kubernetes 1.27 release notes).
	"container-runtime": "v1.27.0",
	// The in-tree Azure credential provider: bootstraps of 1.30 failed on
	// it (Azure/karpenter-provider-azure#338, Azure/AgentBaker#5438).
	"azure-container-registry-config": "v1.30.0",
	// --cloud-config: 1.34 (Azure/karpenter-provider-azure#1258).
	"cloud-config": "v1.34.0",
	// --pod-infra-container-image: 1.35, an urgent upgrade note
	// (kubernetes/kubernetes CHANGELOG/CHANGELOG-1.35.md @8a84988bd671,
	// kubernetes#133779); the sandbox image is containerd's to set.
	"pod-infra-container-image": "v1.35.0",
}

// unknownKubeletFlag is the first of the kubelet's extra args its version
// does not know, or "".
func unknownKubeletFlag(reg bootdata.NodeRegistration, kubeletVersion string) string {
	v, err := version.ParseGeneric(kubeletVersion)
	if err != nil {
		return ""
	}
	var names []string
	for _, a := range reg.KubeletExtraArgs {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		if removed, ok := removedKubeletFlags[n]; ok && v.AtLeast(version.MustParseGeneric(removed)) {
			return "--" + n
		}
	}
	return ""
}

// criEndpoints are the container runtime endpoints a node image serves:
// containerd's (image-builder's default socket and pipe) and, on images
// built with Docker for older releases, dockershim's.
var criEndpoints = map[string]bool{
	"npipe:////./pipe/containerd-containerd": true, "unix:///var/run/containerd/containerd.sock": true,
	"unix:///run/containerd/containerd.sock": true, "/var/run/containerd/containerd.sock": true, "/run/containerd/containerd.sock": true,
	"npipe:////./pipe/dockershim": true, "unix:///var/run/dockershim.sock": true, "/var/run/dockershim.sock": true,
}

// criDialError is why the kubelet cannot reach an endpoint the image does
// not serve: the kubelet's CRI client validation
// (k8s.io/cri-client pkg/remote_runtime.go: "validate CRI v1 runtime API
// for endpoint"), over grpc's dial error for a missing socket or pipe.
func criDialError(endpoint string, windows bool) string {
	if endpoint == "" || criEndpoints[endpoint] {
		return ""
	}
	return criUnreachable(endpoint)
}

// criUnreachable is the kubelet's error for an endpoint nothing listens on.
func criUnreachable(endpoint string) string {
	dial := ""
	switch {
	case strings.HasPrefix(endpoint, "npipe://"):
		pipe := strings.ReplaceAll(strings.TrimPrefix(endpoint, "npipe://"), "/", `\`)
		dial = fmt.Sprintf("open %s: The system cannot find the file specified.", pipe)
	default:
		path := strings.TrimPrefix(endpoint, "unix://")
		dial = fmt.Sprintf("dial unix %s: connect: no such file or directory", path)
	}
	return fmt.Sprintf("validate service connection: validate CRI v1 runtime API for endpoint %q: rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: %s\"", endpoint, dial)
}
