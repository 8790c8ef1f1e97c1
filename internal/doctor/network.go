package doctor

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/winkube/winkube/internal/webhooks/workload"
)

// The overlay numbers Windows needs (from the seeds and CAPZ): VXLAN VNI
// 4096 on UDP 4789, and on Azure, whose VNet MTU is 1400, an overlay MTU of
// at most 1350 (VXLAN adds 50 bytes).
const (
	WantVNI         = 4096
	WantVXLANPort   = 4789
	AzureVNetMTU    = 1400
	vxlanOverhead   = 50
	AzureOverlayMTU = AzureVNetMTU - vxlanOverhead
)

// cniPod says which networking component a pod is, by its name or labels.
func cniPod(p *corev1.Pod) (kubeProxy, cni bool) {
	name := p.Name
	if p.Labels["k8s-app"] == "kube-proxy" || strings.HasPrefix(name, "kube-proxy") {
		return true, false
	}
	for _, c := range []string{"calico-node", "flannel", "antrea-agent", "cilium"} {
		if strings.Contains(name, c) {
			return false, true
		}
	}
	return false, false
}

// WindowsNetworkingPods reports Windows nodes without a ready kube-proxy or
// CNI pod: without them pods there get no network and Services do not work.
func WindowsNetworkingPods(s *State) []Finding {
	type seen struct {
		kubeProxy, cni []*corev1.Pod
	}
	byNode := map[string]*seen{}
	win := s.windowsNodes()
	for name := range win {
		byNode[name] = &seen{}
	}
	for i := range s.Pods {
		p := &s.Pods[i]
		n := byNode[p.Spec.NodeName]
		if n == nil {
			continue
		}
		kp, cni := cniPod(p)
		if kp {
			n.kubeProxy = append(n.kubeProxy, p)
		}
		if cni {
			n.cni = append(n.cni, p)
		}
	}
	names := slices.Sorted(maps.Keys(byNode))
	var out []Finding
	for _, name := range names {
		n := byNode[name]
		for _, c := range []struct {
			what, fix string
			pods      []*corev1.Pod
		}{
			{"kube-proxy", "the kube-proxy-windows HostProcess DaemonSet reaches the cluster through the ClusterResourceSet selected by the Cluster label windows=enabled: check that label, the ClusterResourceSet's status, and the DaemonSet in kube-system", n.kubeProxy},
			{"CNI (Calico or flannel)", "the Windows CNI reaches the cluster through the ClusterResourceSet selected by the Cluster label cni-windows=calico (or flannel): check that label, the ClusterResourceSet's status, and the DaemonSet in kube-system", n.cni},
		} {
			if len(c.pods) == 0 {
				out = append(out, Finding{Check: "windows-networking-pods", Severity: Error, Object: ref("Node", "", name),
					Message: fmt.Sprintf("Windows node %s runs no %s pod: pods there get no network or no Services", name, c.what), Fix: c.fix})
				continue
			}
			for _, p := range c.pods {
				if !podReady(p) {
					out = append(out, Finding{Check: "windows-networking-pods", Severity: Error, Object: ref("Pod", p.Namespace, p.Name),
						Message: fmt.Sprintf("the %s pod %s on Windows node %s is not ready: %s", c.what, p.Name, name, notReadyReason(p)),
						Fix:     "read its logs ('winkube logs' or kubectl logs -n " + p.Namespace + " " + p.Name + "); HostProcess pods need Kubernetes 1.22+ and containerd 1.6+"})
				}
			}
		}
	}
	return out
}

// vxlanSetting is one VNI, port or MTU value read from a CNI's configuration.
type vxlanSetting struct {
	what, source string
	value        int
}

// vxlanSettings reads the overlay's numbers where upstream's manifests put
// them: flannel's net-conf.json (Backend VNI and Port), Calico's
// calico-config (veth_mtu), its FelixConfigurations (vxlanVNI, vxlanPort,
// vxlanMTU), and the FELIX_/VXLAN_ variables of its config maps and pods.
func (s *State) vxlanSettings() (out []vxlanSetting, found bool) {
	add := func(what, source, raw string) {
		if v, err := strconv.Atoi(strings.TrimSpace(raw)); err == nil && v != 0 {
			out = append(out, vxlanSetting{what, source, v})
		}
	}
	for _, cm := range s.ConfigMaps {
		src := ref("ConfigMap", cm.Namespace, cm.Name)
		if raw, ok := cm.Data["net-conf.json"]; ok {
			found = true
			var conf struct {
				Backend struct {
					Type string
					VNI  int
					Port int
					MTU  int
				}
			}
			if err := json.Unmarshal([]byte(raw), &conf); err == nil && strings.EqualFold(conf.Backend.Type, "vxlan") {
				// flannel's defaults are VNI 1 and port 8472 (Linux's), which
				// Windows does not accept.
				vni, port := conf.Backend.VNI, conf.Backend.Port
				if vni == 0 {
					vni = 1
				}
				if port == 0 {
					port = 8472
				}
				out = append(out, vxlanSetting{"VNI", src + " net-conf.json Backend.VNI", vni}, vxlanSetting{"port", src + " net-conf.json Backend.Port", port})
				if conf.Backend.MTU != 0 {
					out = append(out, vxlanSetting{"MTU", src + " net-conf.json Backend.MTU", conf.Backend.MTU})
				}
			}
		}
		if raw, ok := cm.Data["veth_mtu"]; ok {
			found = true
			add("MTU", src+" veth_mtu", raw)
		}
		for key, what := range map[string]string{"VXLAN_VNI": "VNI", "VXLAN_PORT": "port", "VXLAN_MTU": "MTU", "FELIX_VXLANVNI": "VNI", "FELIX_VXLANPORT": "port", "FELIX_VXLANMTU": "MTU"} {
			if raw, ok := cm.Data[key]; ok {
				found = true
				add(what, src+" "+key, raw)
			}
		}
	}
	for _, fc := range s.FelixConfigs {
		found = true
		src := ref("FelixConfiguration", "", fc.GetName())
		for key, what := range map[string]string{"vxlanVNI": "VNI", "vxlanPort": "port", "vxlanMTU": "MTU"} {
			if v, ok, _ := unstructured.NestedInt64(fc.Object, "spec", key); ok {
				add(what, src+" spec."+key, strconv.FormatInt(v, 10))
			}
		}
	}
	for _, ds := range s.DaemonSets {
		for _, c := range append(append([]corev1.Container{}, ds.Spec.Template.Spec.InitContainers...), ds.Spec.Template.Spec.Containers...) {
			for _, e := range c.Env {
				what := map[string]string{"FELIX_VXLANVNI": "VNI", "FELIX_VXLANPORT": "port", "FELIX_VXLANMTU": "MTU", "CNI_MTU": "MTU"}[e.Name]
				if what != "" && e.Value != "" {
					found = true
					add(what, ref("DaemonSet", ds.Namespace, ds.Name)+" "+c.Name+" "+e.Name, e.Value)
				}
			}
		}
	}
	return out, found || len(s.IPPools) > 0
}

// CNIVXLAN checks the overlay's VNI, port and MTU against what Windows and
// Azure need, and that Calico's pools use VXLAN (Windows has no IP-in-IP).
func CNIVXLAN(s *State) []Finding {
	if len(s.windowsNodes()) == 0 {
		return nil
	}
	settings, found := s.vxlanSettings()
	var out []Finding
	if !found {
		return []Finding{{Check: "cni-vxlan", Severity: Warning,
			Message: "no flannel or Calico configuration found (kube-flannel-cfg net-conf.json, calico-config, FelixConfiguration, IPPool): the overlay's VNI, port and MTU cannot be checked",
			Fix:     "install a Windows-capable CNI: the Cluster labels cni=calico and cni-windows=calico (or flannel) select winkube's ClusterResourceSets"}}
	}
	for _, st := range settings {
		switch {
		case st.what == "VNI" && st.value != WantVNI:
			out = append(out, Finding{Check: "cni-vxlan", Severity: Error, Object: st.source,
				Message: fmt.Sprintf("VXLAN VNI is %d (%s); Windows nodes' overlay network uses VNI %d", st.value, st.source, WantVNI),
				Fix:     fmt.Sprintf("set the VNI to %d on Linux and Windows alike (flannel: net-conf.json Backend.VNI; Calico: FelixConfiguration vxlanVNI)", WantVNI)})
		case st.what == "port" && st.value != WantVXLANPort:
			out = append(out, Finding{Check: "cni-vxlan", Severity: Error, Object: st.source,
				Message: fmt.Sprintf("VXLAN UDP port is %d (%s); Windows nodes use %d", st.value, st.source, WantVXLANPort),
				Fix:     fmt.Sprintf("set the port to %d (flannel: net-conf.json Backend.Port; Calico: FelixConfiguration vxlanPort)", WantVXLANPort)})
		case st.what == "MTU" && s.Azure && st.value > AzureOverlayMTU:
			out = append(out, Finding{Check: "cni-vxlan", Severity: Error, Object: st.source,
				Message: fmt.Sprintf("overlay MTU is %d (%s), but Azure's VNet MTU is %d and VXLAN adds %d bytes: larger packets between Linux and Windows nodes are fragmented or dropped", st.value, st.source, AzureVNetMTU, vxlanOverhead),
				Fix:     fmt.Sprintf("set the overlay MTU to %d (Calico: veth_mtu and vxlanMTU; flannel takes the node's eth0 MTU, which must be %d, minus %d)", AzureOverlayMTU, AzureVNetMTU, vxlanOverhead)})
		}
	}
	for _, pool := range s.IPPools {
		mode, _, _ := unstructured.NestedString(pool.Object, "spec", "vxlanMode")
		ipip, _, _ := unstructured.NestedString(pool.Object, "spec", "ipipMode")
		if mode == "Always" {
			continue
		}
		sev, why := Error, "Windows nodes reach pods only over VXLAN (they have no IP-in-IP)"
		if mode == "CrossSubnet" {
			sev, why = Warning, "Calico for Windows supports VXLAN mode Always only"
		}
		out = append(out, Finding{Check: "cni-vxlan", Severity: sev, Object: ref("IPPool", "", pool.GetName()),
			Message: fmt.Sprintf("IPPool %s has vxlanMode %q (ipipMode %q): %s", pool.GetName(), mode, ipip, why),
			Fix:     "set the pool's vxlanMode: Always and ipipMode: Never (CALICO_IPV4POOL_VXLAN=Always when calico-node creates it)"})
	}
	return out
}

// WindowsServiceBackends reports Services with more destinations than old
// Windows Server 2019 nodes can load-balance over: kube-proxy on every
// Windows node programs every Service, so one old node is enough.
func WindowsServiceBackends(s *State) []Finding {
	var old []string
	for name, n := range s.windowsNodes() {
		if workload.OldWindowsLoadBalancer(n.Status.NodeInfo.KernelVersion) {
			old = append(old, name+" ("+n.Status.NodeInfo.KernelVersion+")")
		}
	}
	if len(old) == 0 {
		return nil
	}
	sort.Strings(old)
	backends := map[string]map[string]bool{}
	for _, sl := range s.Slices {
		svc := sl.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		key := sl.Namespace + "/" + svc
		if backends[key] == nil {
			backends[key] = map[string]bool{}
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				backends[key][a] = true
			}
		}
	}
	keys := slices.Sorted(maps.Keys(backends))
	var out []Finding
	for _, k := range keys {
		if n := len(backends[k]); n > workload.MaxOldWindowsBackends {
			ns, name, _ := strings.Cut(k, "/")
			out = append(out, Finding{Check: "windows-service-backends", Severity: Error, Object: ref("Service", ns, name),
				Message: fmt.Sprintf("Service %s has %d backends, but Windows nodes %s run Windows Server 2019 before 10.0.17763.%d, whose load balancer takes at most %d: kube-proxy there fails to program it", k, n, strings.Join(old, ", "), workload.FixedRevision, workload.MaxOldWindowsBackends),
				Fix:     fmt.Sprintf("replace those nodes with a current Windows Server 2019 image (10.0.17763.%d or later; 'winkube images list --os windows --windows-version 2019') or Windows Server 2022, or spread the backends over several Services of at most %d", workload.FixedRevision, workload.MaxOldWindowsBackends)})
		}
	}
	return out
}

// ServiceSelectors reports Services that select no pod, and ports whose
// targetPort no selected container declares.
func ServiceSelectors(s *State) []Finding {
	var out []Finding
	for i := range s.Services {
		svc := &s.Services[i]
		if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var pods []*corev1.Pod
		for j := range s.Pods {
			p := &s.Pods[j]
			if p.Namespace == svc.Namespace && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && sel.Matches(labels.Set(p.Labels)) {
				pods = append(pods, p)
			}
		}
		obj := ref("Service", svc.Namespace, svc.Name)
		if len(pods) == 0 {
			out = append(out, Finding{Check: "services", Severity: Warning, Object: obj,
				Message: fmt.Sprintf("Service %s/%s selects no pod (selector %s): it has no endpoints", svc.Namespace, svc.Name, sel),
				Fix:     "make spec.selector match the labels of the pods' template (kubectl get pods --show-labels), or start those pods"})
			continue
		}
		for _, port := range svc.Spec.Ports {
			tp := port.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp.IntVal = port.Port
			}
			if declares(pods, tp.String(), tp.Type == intstr.String, tp.IntVal) {
				continue
			}
			if tp.Type == intstr.String {
				out = append(out, Finding{Check: "services", Severity: Error, Object: obj,
					Message: fmt.Sprintf("Service %s/%s port %d targets the port named %q, which no selected container declares: it gets no endpoints for it", svc.Namespace, svc.Name, port.Port, tp.StrVal),
					Fix:     "name the container port (ports[].name) as the Service's targetPort, or use its number"})
				continue
			}
			out = append(out, Finding{Check: "services", Severity: Warning, Object: obj,
				Message: fmt.Sprintf("Service %s/%s port %d targets port %d, which no selected container declares", svc.Namespace, svc.Name, port.Port, tp.IntVal),
				Fix:     "check the targetPort is where the application listens, and declare it in the containers' ports"})
		}
	}
	return out
}

func declares(pods []*corev1.Pod, name string, named bool, number int32) bool {
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if named && cp.Name == name || !named && cp.ContainerPort == number {
					return true
				}
			}
		}
	}
	return false
}
