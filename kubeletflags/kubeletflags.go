// Package kubeletflags knows which kubelet flags a Kubernetes release no
// longer accepts: the simulated kubelet (emulator/machines) refuses to
// start on them, as a real kubelet does, and the upgrade plan
// (internal/upgrade) finds them in bootstrap configs before a rollout
// boots kubelets that would not start. One table, so the two cannot
// disagree. It imports neither emulator/ nor internal/, which both import
// it.
package kubeletflags

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/version"
)

// removed are kubelet flags with the release that removed them: a kubelet
// of that release or later exits on them with pflag's "unknown flag"
// (cmd/kubelet/app/server.go wraps it as "failed to parse kubelet flag").
// No complete list of the flags a kubelet accepts is kept here, so a flag
// not listed is taken as known.
var removed = map[string]string{
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

// Flag is a flag a kubelet version does not know, with the release that
// removed it.
type Flag struct {
	Name    string // without the leading dashes
	Removed string // vX.Y.Z
}

// Unknown are the flags among names (without the leading dashes) that a
// kubelet of kubeletVersion no longer accepts, sorted by name; none when
// the version cannot be read.
func Unknown(names []string, kubeletVersion string) []Flag {
	v, err := version.ParseGeneric(kubeletVersion)
	if err != nil {
		return nil
	}
	var out []Flag
	for _, n := range names {
		if r, ok := removed[n]; ok && v.AtLeast(version.MustParseGeneric(r)) {
			out = append(out, Flag{Name: n, Removed: r})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
