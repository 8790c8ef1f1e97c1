package localworld

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/apicallers"
	"github.com/winkube/winkube/internal/localworld/bringup"
)

// bootTimes are when the machine runtime began to boot each machine (by
// VM name): when Azure would report the VM running.
type bootTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (b *bootTimes) note(machine string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at == nil {
		b.at = map[string]time.Time{}
	}
	if _, ok := b.at[machine]; !ok {
		b.at[machine] = time.Now()
	}
}

// of is zero for a machine not booted, or unnamed (no VM yet).
func (b *bootTimes) of(machine string) time.Time {
	if machine == "" {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.at[machine]
}

// Timeline reads where the cluster's bring-up spent its time.
func (w *World) Timeline(ctx context.Context) (bringup.Timeline, error) {
	var tl bringup.Timeline
	ms := &clusterv1.MachineList{}
	if err := w.Client.List(ctx, ms, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: w.opts.Name}); err != nil {
		return tl, err
	}
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		return tl, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return tl, err
	}
	cni, err := w.cniApplied(ctx, cs, &tl)
	if err != nil {
		return tl, err
	}
	cniPods, err := daemonSetPods(ctx, cs, cni)
	if err != nil {
		return tl, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return tl, err
	}
	ams := &infrav1.AzureMachineList{}
	if err := w.Client.List(ctx, ams, client.InNamespace(namespace)); err != nil {
		return tl, err
	}
	vmName := map[string]string{}
	for _, am := range ams.Items {
		vmName[am.Name] = am.Status.VMName
	}
	byName, byProvider := map[string]*corev1.Node{}, map[string]*corev1.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		byName[n.Name] = n
		if n.Spec.ProviderID != "" {
			byProvider[strings.ToLower(n.Spec.ProviderID)] = n
		}
		if t := readySince(n); !t.IsZero() {
			tl.NodesReady = append(tl.NodesReady, t)
		}
	}
	sort.Slice(tl.NodesReady, func(i, j int) bool { return tl.NodesReady[i].Before(tl.NodesReady[j]) })
	for _, m := range ms.Items {
		var node *corev1.Node
		if m.Status.NodeRef.IsDefined() {
			node = byName[m.Status.NodeRef.Name]
		} else if m.Spec.ProviderID != "" {
			// Cluster API sets the node reference some time after the node
			// is Ready (its cluster cache sees the Node first): the
			// provider ID names the same Node.
			node = byProvider[strings.ToLower(m.Spec.ProviderID)]
		}
		if node == nil {
			// Before the cloud node manager has set the Node's provider
			// ID (a node can be Ready first: its CNI configuration is
			// all NetworkReady needs), the Node is the one the kubelet
			// registered under the VM's computer name, which the
			// instance metadata gives it as local_hostname.
			node = byName[vmName[m.Spec.InfrastructureRef.Name]]
		}
		trueSince := func(condition string) time.Time {
			if c := conditions.Get(&m, condition); c != nil && c.Status == metav1.ConditionTrue {
				return c.LastTransitionTime.Time
			}
			return time.Time{}
		}
		provisioned, bootstrap := trueSince(clusterv1.MachineInfrastructureReadyCondition), trueSince(clusterv1.MachineBootstrapConfigReadyCondition)
		booting := w.boots.of(vmName[m.Spec.InfrastructureRef.Name])
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
			if first := &tl.FirstControlPlane; first.Created.IsZero() || m.CreationTimestamp.Time.Before(first.Created) {
				*first = bringup.ControlPlaneTimes{Created: m.CreationTimestamp.Time, VMBooting: booting}
				if node != nil {
					first.NodeRegistered = node.CreationTimestamp.Time
				}
			}
			if !provisioned.IsZero() && (tl.ControlPlaneProvisioned.IsZero() || provisioned.Before(tl.ControlPlaneProvisioned)) {
				tl.ControlPlaneProvisioned = provisioned
			}
			if node != nil {
				if t := readySince(node); !t.IsZero() && (tl.FirstControlPlaneReady.IsZero() || t.Before(tl.FirstControlPlaneReady)) {
					tl.FirstControlPlaneReady = t
				}
			}
			continue
		}
		wt := bringup.WorkerTimes{Machine: m.Name, Created: m.CreationTimestamp.Time, BootstrapReady: bootstrap, VMBooting: booting, Provisioned: provisioned}
		if node != nil {
			wt.NodeRegistered, wt.NodeReady = node.CreationTimestamp.Time, readySince(node)
			if p := cniPods[node.Name]; p != nil {
				wt.CNIPodCreated = p.CreationTimestamp.Time
				for _, c := range p.Status.Conditions {
					if c.Status != corev1.ConditionTrue {
						continue
					}
					switch c.Type {
					case corev1.PodScheduled:
						wt.CNIPodScheduled = c.LastTransitionTime.Time
					case corev1.PodReady:
						wt.CNIPodReady = c.LastTransitionTime.Time
					}
				}
			}
		}
		tl.Workers = append(tl.Workers, wt)
	}
	cluster := &clusterv1.Cluster{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: w.opts.Name}, cluster); err != nil {
		return tl, err
	}
	if c := conditions.Get(cluster, clusterv1.ClusterControlPlaneInitializedCondition); c != nil && c.Status == metav1.ConditionTrue {
		tl.FirstControlPlane.Initialized = c.LastTransitionTime.Time
	}
	return tl, nil
}

// cniApplied is when the CNI's DaemonSets appeared in the workload
// cluster: those in the ConfigMaps of the ClusterResourceSets that select
// clusters by the "cni" label, created there once Cluster API applied them.
func (w *World) cniApplied(ctx context.Context, cs kubernetes.Interface, tl *bringup.Timeline) ([]*appsv1.DaemonSet, error) {
	sets := &addonsv1.ClusterResourceSetList{}
	if err := w.Client.List(ctx, sets, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	var out []*appsv1.DaemonSet
	for _, set := range sets.Items {
		sel := set.Spec.ClusterSelector.MatchLabels
		if sel["cni"] == "" && sel["cni-windows"] == "" {
			continue
		}
		for _, ref := range set.Spec.Resources {
			if ref.Kind != "ConfigMap" {
				continue
			}
			cm := &corev1.ConfigMap{}
			if err := w.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, cm); err != nil {
				return nil, err
			}
			for _, data := range cm.Data {
				dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(data), 4096)
				for {
					var u unstructured.Unstructured
					if err := dec.Decode(&u.Object); err != nil {
						break
					}
					if u.GetKind() != "DaemonSet" {
						continue
					}
					ds, err := cs.AppsV1().DaemonSets(u.GetNamespace()).Get(ctx, u.GetName(), metav1.GetOptions{})
					if err != nil {
						return nil, fmt.Errorf("the CNI's DaemonSet %s/%s: %w", u.GetNamespace(), u.GetName(), err)
					}
					if t := ds.CreationTimestamp.Time; t.After(tl.CNIApplied) {
						tl.CNIApplied = t
					}
					out = append(out, ds)
				}
			}
		}
	}
	return out, nil
}

// daemonSetPods finds the pods of the DaemonSets by node: the first
// created where a node has several.
func daemonSetPods(ctx context.Context, cs kubernetes.Interface, sets []*appsv1.DaemonSet) (map[string]*corev1.Pod, error) {
	out := map[string]*corev1.Pod{}
	listed := map[string]*corev1.PodList{}
	for _, ds := range sets {
		pods, ok := listed[ds.Namespace]
		if !ok {
			var err error
			if pods, err = cs.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
				return nil, err
			}
			listed[ds.Namespace] = pods
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != ds.UID || p.Spec.NodeName == "" {
				continue
			}
			if cur := out[p.Spec.NodeName]; cur == nil || p.CreationTimestamp.Before(&cur.CreationTimestamp) {
				out[p.Spec.NodeName] = p
			}
		}
	}
	return out, nil
}

func readySince(n *corev1.Node) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// APIRequests counts the requests the workload cluster's API servers have
// served, by "VERB resource[/subresource]", from their
// apiserver_request_total metric.
func (w *World) APIRequests(ctx context.Context) (map[string]float64, error) {
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	servers := 0
	for _, n := range w.rt.Nodes() {
		if n.APIServer == "" {
			continue
		}
		c := rest.CopyConfig(cfg)
		// Each control plane's own server, not one behind the load balancer.
		c.Host = "https://" + n.APIServer
		if err := scrapeRequests(ctx, c, out); err != nil {
			return nil, err
		}
		servers++
	}
	if servers == 0 {
		return nil, fmt.Errorf("no control plane runs")
	}
	return out, nil
}

// ManagementRequestsByController counts the requests the controllers'
// manager has made so far, by the controller whose reconcile made each
// ("" for those made outside a reconcile: its caches, its webhooks).
// Requests of the local world's own machinery do not pass through it.
func (w *World) ManagementRequestsByController() map[apicallers.Key]float64 {
	if w.callers == nil {
		return nil
	}
	return w.callers.Counts()
}

// ManagementRequests counts the requests the management API server has
// served, as APIRequests does.
func (w *World) ManagementRequests(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	return out, scrapeRequests(ctx, rest.CopyConfig(w.Config), out)
}

func scrapeRequests(ctx context.Context, c *rest.Config, out map[string]float64) error {
	c.Timeout = 30 * time.Second
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.Host, "/")+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s/metrics: %w", c.Host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/metrics: %s", c.Host, resp.Status)
	}
	if err := addRequestTotals(resp.Body, out); err != nil {
		return fmt.Errorf("%s/metrics: %w", c.Host, err)
	}
	return nil
}

// addRequestTotals adds the apiserver_request_total samples of a
// Prometheus text exposition to out.
func addRequestTotals(r io.Reader, out map[string]float64) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "apiserver_request_total{")
		if !ok {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		labels := promLabels(line[:end])
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		k := labels["verb"] + " " + labels["resource"]
		if labels["subresource"] != "" {
			k += "/" + labels["subresource"]
		}
		if labels["resource"] == "" {
			// A non-resource request's path (for the known ones).
			k = labels["verb"] + " " + labels["subresource"]
			if labels["subresource"] == "" {
				k = labels["verb"] + " (non-resource)"
			}
		}
		out[k] += v
	}
	return sc.Err()
}

// promLabels reads `a="x",b="y"`, with Prometheus' escapes.
func promLabels(s string) map[string]string {
	out := map[string]string{}
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		name := strings.TrimLeft(s[:eq], ", ")
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			val.WriteByte(s[i])
		}
		out[name] = val.String()
		if i+1 > len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}

// Processes are the pids of the world's processes: the management plane
// (its etcd and kube-apiserver) and the machines' control planes.
func (w *World) Processes() (management, machines []int) {
	mine := map[int]bool{}
	for _, n := range w.rt.Nodes() {
		for _, p := range n.Pids {
			machines = append(machines, p)
			mine[p] = true
		}
	}
	for _, p := range Descendants(os.Getpid()) {
		if !mine[p] {
			switch comm(p) {
			case "etcd", "kube-apiserver":
				management = append(management, p)
			}
		}
	}
	return management, machines
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// Descendants lists the processes below pid, from /proc (Linux).
func Descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(p); len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	sort.Ints(out)
	return out
}

// procStat is /proc/PID/stat after the command name: field 0 is the
// state, 1 the parent, 11 and 12 utime and stime.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// comm may hold spaces and parentheses: read after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// clockTicks is Linux's USER_HZ, the unit of /proc's CPU times: 100 on
// every architecture Go supports (sysconf would need cgo).
const clockTicks = 100

// CPUTime is the CPU (user and system) the processes have used so far;
// processes gone are not counted.
func CPUTime(pids ...int) time.Duration {
	var ticks int64
	for _, p := range pids {
		if f := procStat(p); len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// MemoryKB sums a kB field of /proc/PID/status over the processes, such
// as "VmRSS:" (resident now) or "VmHWM:" (peak resident).
func MemoryKB(field string, pids ...int) int {
	total := 0
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, field) {
				if f := strings.Fields(l); len(f) > 1 {
					v, _ := strconv.Atoi(f[1])
					total += v
				}
			}
		}
	}
	return total
}
