package doctor

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What kube-proxy on Windows (k8s.io/kubernetes@v1.36.3
// pkg/proxy/winkernel) and HNS do with a Service, which the emulator's data
// plane (emulator/machines/kubeproxy/windows.go) does too; the docs' list is
// the "Limitations" section and the "Windows Service Settings" table of
// concepts/services-networking/windows-networking.md (kubernetes/website at
// 038a69be0aae7dacdbdd60d7398880b5babbf343). The numbers are kept here as
// well as there: the emulator imports nothing of winkube.
const (
	ws2019Build = 17763
	ws2022Build = 20348
	// dsrRevision: Windows Server 2019's HNS has DSR from 10.0.17763.1432
	// (KB4571748, August 2020; microsoft/Windows-Containers#19,
	// containernetworking/plugins#613, projectcalico/node#1015).
	dsrRevision = 1432
	// defaultAffinitySeconds is what the API server sets
	// sessionAffinityConfig.clientIP.timeoutSeconds to when left out.
	defaultAffinitySeconds = 10800
)

// kernelBuild splits a Windows kernel version ("10.0.17763.1339") into its
// build and revision; zeros when it is no such version.
func kernelBuild(kernel string) (build, revision int) {
	parts := strings.Split(kernel, ".")
	if len(parts) >= 3 {
		build, _ = strconv.Atoi(parts[2])
	}
	if len(parts) >= 4 {
		if f := strings.Fields(parts[3]); len(f) > 0 {
			revision, _ = strconv.Atoi(f[0])
		}
	}
	return build, revision
}

// windowsNodesWhere lists the Windows nodes (name and kernel) whose kernel
// matches, sorted.
func (s *State) windowsNodesWhere(match func(build, revision int) bool) []string {
	var out []string
	for name, n := range s.windowsNodes() {
		k := n.Status.NodeInfo.KernelVersion
		if b, r := kernelBuild(k); b > 0 && match(b, r) {
			out = append(out, name+" ("+k+")")
		}
	}
	sort.Strings(out)
	return out
}

// windowsOverlay says whether the Windows nodes' pod network is an HNS
// overlay (VXLAN), and what says so: flannel's net-conf.json backend
// vxlan (win-overlay; host-gw is win-bridge's L2Bridge), Calico's VXLAN
// backend (calico-config calico_backend, CALICO_NETWORKING_BACKEND, which
// Calico for Windows defaults to vxlan) or a VXLAN IPPool.
func (s *State) windowsOverlay() (bool, string) {
	for _, cm := range s.ConfigMaps {
		src := ref("ConfigMap", cm.Namespace, cm.Name)
		if raw, ok := cm.Data["net-conf.json"]; ok {
			var conf struct{ Backend struct{ Type string } }
			if json.Unmarshal([]byte(raw), &conf) == nil && strings.EqualFold(conf.Backend.Type, "vxlan") {
				return true, src + " net-conf.json Backend.Type vxlan"
			}
		}
		if strings.EqualFold(cm.Data["calico_backend"], "vxlan") {
			return true, src + " calico_backend vxlan"
		}
		if strings.EqualFold(cm.Data["CALICO_NETWORKING_BACKEND"], "vxlan") {
			return true, src + " CALICO_NETWORKING_BACKEND vxlan"
		}
	}
	for _, ds := range s.DaemonSets {
		for _, c := range ds.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == "CALICO_NETWORKING_BACKEND" && strings.EqualFold(e.Value, "vxlan") {
					return true, ref("DaemonSet", ds.Namespace, ds.Name) + " CALICO_NETWORKING_BACKEND vxlan"
				}
			}
		}
	}
	for _, pool := range s.IPPools {
		if mode, _, _ := unstructured.NestedString(pool.Object, "spec", "vxlanMode"); mode == "Always" || mode == "CrossSubnet" {
			return true, ref("IPPool", "", pool.GetName()) + " vxlanMode " + mode
		}
	}
	return false, ""
}

func exposedOnNodes(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

func nodePorts(svc *corev1.Service) string {
	var ps []string
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			ps = append(ps, strconv.Itoa(int(p.NodePort)))
		}
	}
	return strings.Join(ps, ", ")
}

// WindowsServices explains what the Windows data plane does with Services
// that rely on what it lacks: kube-proxy on every Windows node programs
// every Service, so each Windows node's limits apply to each Service.
func WindowsServices(s *State) []Finding {
	win := s.windowsNodes()
	if len(win) == 0 {
		return nil
	}
	const check = "windows-services"
	noDSR := s.windowsNodesWhere(func(b, r int) bool { return b < ws2019Build || b == ws2019Build && r < dsrRevision })
	noAffinity := s.windowsNodesWhere(func(b, _ int) bool { return b < ws2022Build })
	withAffinity := s.windowsNodesWhere(func(b, _ int) bool { return b >= ws2022Build })
	overlay, overlaySource := s.windowsOverlay()
	var winNames []string
	for name := range win {
		winNames = append(winNames, name)
	}
	sort.Strings(winNames)

	var out []Finding
	var ownNodePort []string
	for i := range s.Services {
		svc := &s.Services[i]
		obj := ref("Service", svc.Namespace, svc.Name)
		key := svc.Namespace + "/" + svc.Name
		if exposedOnNodes(svc) && nodePorts(svc) != "" {
			ownNodePort = append(ownNodePort, key+" ("+nodePorts(svc)+")")
		}
		if exposedOnNodes(svc) && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && len(noDSR) > 0 {
			out = append(out, Finding{Check: check, Severity: Warning, Object: obj,
				Message: fmt.Sprintf("Service %s has externalTrafficPolicy Local, but Windows nodes %s run a build before 10.0.17763.%d, whose HNS has no DSR: kube-proxy there treats the policy as Cluster (its log: \"Flags enabled for service\" ... localTrafficDSR=false), so a connection to their NodePort goes to any endpoint, other nodes' included, without the client's source IP", key, strings.Join(noDSR, ", "), dsrRevision),
				Fix:     fmt.Sprintf("replace those nodes with Windows Server 2019 10.0.17763.%d or later, or Windows Server 2022 ('winkube images list --os windows'); the cloud load balancer's health probe still keeps external traffic to nodes with a local endpoint", dsrRevision)})
		}
		if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			if len(noAffinity) > 0 {
				out = append(out, Finding{Check: check, Severity: Warning, Object: obj,
					Message: fmt.Sprintf("Service %s asks for ClientIP session affinity, which needs Windows Server 2022: on Windows nodes %s kube-proxy logs \"Session Affinity is not supported on this version of Windows\" and a client's connections through those nodes spread over the backends", key, strings.Join(noAffinity, ", ")),
					Fix:     "move the Windows nodes to Windows Server 2022 or later, or keep the session state out of the pods (a shared store) so any backend serves a client"})
			}
			if t := svc.Spec.SessionAffinityConfig; len(withAffinity) > 0 && t != nil && t.ClientIP != nil && t.ClientIP.TimeoutSeconds != nil && *t.ClientIP.TimeoutSeconds != defaultAffinitySeconds {
				out = append(out, Finding{Check: check, Severity: Warning, Object: obj,
					Message: fmt.Sprintf("Service %s sets sessionAffinityConfig.clientIP.timeoutSeconds to %d, which Windows nodes %s ignore: HNS's source-IP load balancing has no timeout, so a client stays on its backend until the Service's endpoints change", key, *t.ClientIP.TimeoutSeconds, strings.Join(withAffinity, ", ")),
					Fix:     "do not rely on the affinity ending after timeoutSeconds for clients that reach the Service through Windows nodes"})
			}
		}
		if overlay {
			if f := overlayIPv6(svc, key, obj, winNames, overlaySource); f != nil {
				out = append(out, *f)
			}
		}
	}
	if len(ownNodePort) > 0 {
		out = append(out, Finding{Check: check, Severity: Info,
			Message: fmt.Sprintf("Windows nodes %s do not reach their own NodePorts (other nodes and external clients do): NodePorts %s", strings.Join(winNames, ", "), strings.Join(ownNodePort, "; ")),
			Fix:     "from a Windows node, reach a Service by its ClusterIP (Windows Server 2022 and later) or through another node's NodePort"})
	}
	return out
}

// overlayIPv6 explains an IPv6 or dual-stack Service on Windows nodes
// whose overlay network makes kube-proxy run IPv4 single-stack.
func overlayIPv6(svc *corev1.Service, key, obj string, winNames []string, source string) *Finding {
	var v6, v4 bool
	for _, ip := range svc.Spec.ClusterIPs {
		if ip == "" || ip == corev1.ClusterIPNone {
			continue
		}
		if strings.Contains(ip, ":") {
			v6 = true
		} else {
			v4 = true
		}
	}
	if !v6 {
		return nil
	}
	nodes := strings.Join(winNames, ", ")
	why := fmt.Sprintf("the Windows nodes' network is an overlay (%s), on which kube-proxy logs \"Winoverlay does not support dual-stack, falling back to single-stack\" and programs IPv4 only", source)
	fix := "run IPv4 Services for Windows clients, or give the Windows nodes an L2Bridge network (flannel host-gw, Calico windows-bgp), where kube-proxy runs dual-stack"
	if !v4 {
		return &Finding{Check: "windows-services", Severity: Error, Object: obj,
			Message: fmt.Sprintf("Service %s is IPv6 only, but %s: on Windows nodes %s it is not programmed, its ClusterIP is unreachable from there and its NodePorts are not served", key, why, nodes), Fix: fix}
	}
	return &Finding{Check: "windows-services", Severity: Warning, Object: obj,
		Message: fmt.Sprintf("Service %s is dual-stack, but %s: on Windows nodes %s only its IPv4 ClusterIP and IPv4 endpoints are served", key, why, nodes), Fix: fix}
}
