package upstreame2e

import (
	"regexp"
	"strings"
)

// Focus selects the specs sig-windows owns; test/e2e/windows' sigDescribe
// prefixes every spec with it (framework.go at k8s.io/kubernetes v1.36.3).
const Focus = `\[sig-windows\]`

// Skip is a group of upstream specs the local world does not model, with why.
type Skip struct {
	// Match is a fragment of the spec's full text (literal, not a regexp).
	Match string
	// Reason says what the local world lacks that the spec needs.
	Reason string
	// Source is the upstream file that holds the specs.
	Source string
}

// Skips classifies every Describe of test/e2e/windows at k8s.io/kubernetes
// v1.36.3 (module zip from proxy.golang.org; hack/e2e/go.sum holds its hash)
// that the local world does not model. Every spec of that directory not
// matched here runs: HostProcess containers (but the two below), the
// SecurityContext specs, Services (NodePort), Hybrid cluster network's
// stable networking, DNS, Windows volume mounts and Density.
var Skips = []Skip{
	{Match: "GMSA Full", Source: "test/e2e/windows/gmsa_full.go",
		Reason: "needs an Active Directory domain, the gMSA webhook and an SMB share on a domain-joined node; the local world has no domain controller nor SMB server"},
	{Match: "GMSA Kubelet", Source: "test/e2e/windows/gmsa_kubelet.go",
		Reason: "checks that a GMSA credential spec reaches the container by asking the domain (nltest); simulated nodes join no domain"},
	{Match: "HyperV containers", Source: "test/e2e/windows/hyperv.go",
		Reason: "Hyper-V isolation (the runhcs-wcow-hypervisor RuntimeClass); simulated Windows nodes run process-isolated containers only"},
	{Match: "Device Plugin", Source: "test/e2e/windows/device_plugin.go",
		Reason: "a GPU (DirectX) device plugin DaemonSet; simulated nodes have no devices and no device-plugin registration"},
	{Match: "RebootHost containers", Source: "test/e2e/windows/reboot_node.go",
		Reason: "reboots the node's OS from a HostProcess container (upstream also skips it until graceful shutdown is enabled)"},
	{Match: "GracefulNodeShutdown", Source: "test/e2e/windows/node_shutdown.go",
		Reason: "shuts a node's OS down and checks the kubelet's shutdown manager; simulated machines have no OS shutdown to observe"},
	{Match: "Eviction", Source: "test/e2e/windows/eviction.go",
		Reason: "drives a node into memory pressure; the simulated kubelet accounts no memory use, so it never evicts"},
	{Match: "Kubelet-Stats", Source: "test/e2e/windows/kubelet_stats.go",
		Reason: "reads /stats/summary through the API server's node proxy, which refuses the nodes' loopback addresses (README \"Node stats\")"},
	{Match: "Cpu Resources", Source: "test/e2e/windows/cpu_limits.go",
		Reason: "reads CPU use from /stats/summary through the node proxy (refused for loopback node addresses, README \"Node stats\")"},
	{Match: "Memory Limits", Source: "test/e2e/windows/memory_limits.go",
		Reason: "reads the kubelet's /configz through the node proxy (refused for loopback node addresses, README \"Node stats\")"},
	{Match: "metrics should report count of started and failed to start HostProcess containers", Source: "test/e2e/windows/host_process.go",
		Reason: "reads the kubelet's /metrics through the node proxy (refused for loopback node addresses, README \"Node stats\")"},
	{Match: "container stats validation", Source: "test/e2e/windows/host_process.go",
		Reason: "reads /stats/summary through the node proxy (refused for loopback node addresses, README \"Node stats\")"},
	{Match: "should provide Internet connection", Source: "test/e2e/windows/hybrid_network.go",
		Reason: "connects to 8.8.8.8 and www.google.com; the local world is hermetic: pods have no route to the public Internet"},
}

// SkipRegexp is the --ginkgo.skip expression for Skips.
func SkipRegexp() string {
	parts := make([]string, 0, len(Skips))
	for _, s := range Skips {
		parts = append(parts, regexp.QuoteMeta(s.Match))
	}
	return strings.Join(parts, "|")
}

// SkipFor returns the Skip a spec's full text falls under, if any.
func SkipFor(spec string) (Skip, bool) {
	for _, s := range Skips {
		if strings.Contains(spec, s.Match) {
			return s, true
		}
	}
	return Skip{}, false
}
