package machines

import (
	"fmt"
	"strings"

	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/kubeletflags"
)

// unknownKubeletFlag is the first of the kubelet's extra args its version
// does not know, or "".
func unknownKubeletFlag(reg bootdata.NodeRegistration, kubeletVersion string) string {
	var names []string
	for _, a := range reg.KubeletExtraArgs {
		names = append(names, a.Name)
	}
	if u := kubeletflags.Unknown(names, kubeletVersion); len(u) > 0 {
		return "--" + u[0].Name
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
