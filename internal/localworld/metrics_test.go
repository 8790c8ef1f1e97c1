package localworld_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/internal/poll"
)

// loadAnnotation is the simulated kubelet's knob for a pod's CPU use, in
// percent of its request.
const loadAnnotation = "emulator.winkube.dev/cpu-utilization"

// startAutoscaling creates a Windows Deployment whose pods use 180% of
// their CPU request and a HorizontalPodAutoscaler aiming at 50%: started
// early, so that metrics-server's first two scrapes and the HPA's syncs
// happen while the other checks run.
func startAutoscaling(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	labels := map[string]string{"app": "web-hpa"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-hpa"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{loadAnnotation: "180"}}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelOSStable: "windows"},
			Containers: []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}}}}}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-hpa"}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web-hpa"},
		MinReplicas:    ptr.To[int32](1), MaxReplicas: 3,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
			Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)}}}},
		// Scale down at once, not after the default five minutes.
		Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0)}},
	}}
	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkMetrics is `kubectl top nodes` and `kubectl top pods` through the
// aggregated metrics.k8s.io API that the metrics-server add-on serves
// (the API server reaching its pod through its egress), then the
// HorizontalPodAutoscaler scaling the Windows Deployment up on those
// numbers, and down when its pods' load drops.
func checkMetrics(ctx context.Context, t *testing.T, cfg *rest.Config, kubeconfig []byte, bin string, cs kubernetes.Interface, start time.Time) {
	t.Helper()
	mc := metricsclient.NewForConfigOrDie(cfg)
	poll.Until(t, 3*time.Minute, func() string {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		nm, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "kubectl top nodes: " + err.Error() + "; " + metricsServerState(ctx, cs)
		}
		got := map[string]string{}
		for _, m := range nm.Items {
			if !m.Usage.Cpu().IsZero() && !m.Usage.Memory().IsZero() {
				got[m.Name] = m.Usage.Cpu().String() + "/" + m.Usage.Memory().String()
			}
		}
		for _, n := range nodes.Items {
			if _, ok := got[n.Name]; !ok {
				return fmt.Sprintf("kubectl top nodes: no usage for %s (%s) in %v", n.Name, n.Labels[corev1.LabelOSStable], got)
			}
		}
		pm, err := mc.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{LabelSelector: "app=iis-2022"})
		if err != nil || len(pm.Items) == 0 {
			return fmt.Sprintf("kubectl top pods -l app=iis-2022: %v", err)
		}
		for _, p := range pm.Items {
			if len(p.Containers) == 0 || p.Containers[0].Usage.Memory().IsZero() {
				return fmt.Sprintf("pod %s has no container usage", p.Name)
			}
		}
		return ""
	})
	t.Logf("%6.1fs kubectl top nodes and pods answer for Linux and Windows nodes", time.Since(start).Seconds())
	metricsDiscovered(ctx, t, cs)
	kubectlTop(ctx, t, kubeconfig, bin, cs)
	t.Logf("%6.1fs aggregated discovery lists metrics.k8s.io; the built kubectl's top answers", time.Since(start).Seconds())

	replicas := func(want int32) func() string {
		return func() string {
			h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "web-hpa", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if h.Status.DesiredReplicas != want || h.Status.CurrentReplicas != want {
				var cpu string
				for _, m := range h.Status.CurrentMetrics {
					if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
						cpu = fmt.Sprintf("%d%%", *m.Resource.Current.AverageUtilization)
					}
				}
				return fmt.Sprintf("HPA: %d current, %d desired (CPU %s), want %d; conditions %v", h.Status.CurrentReplicas, h.Status.DesiredReplicas, cpu, want, h.Status.Conditions)
			}
			return ""
		}
	}
	poll.Until(t, 3*time.Minute, replicas(3))
	t.Logf("%6.1fs the HPA scaled the Windows Deployment to 3 at 180%% of its CPU request", time.Since(start).Seconds())
	// The load drops: the running pods' annotation changes, as the
	// README's recipe does without a rollout.
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web-hpa"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"5"}}}`, loadAnnotation)
		if _, err := cs.CoreV1().Pods("default").Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatal(err)
		}
	}
	poll.Until(t, 3*time.Minute, replicas(1))
	t.Logf("%6.1fs the HPA scaled it back to 1 at 5%%", time.Since(start).Seconds())
}

// metricsDiscovered reads the workload API server's aggregated discovery
// (/apis as apidiscovery.k8s.io/v2, which kubectl uses since 1.30 and
// from which client-go drops a Stale group): metrics.k8s.io v1beta1 is
// there, current, with its nodes and pods, and no group is Stale.
func metricsDiscovered(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	poll.Until(t, time.Minute, func() string {
		raw, err := cs.Discovery().RESTClient().Get().AbsPath("/apis").
			SetHeader("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList").DoRaw(ctx)
		if err != nil {
			return "GET /apis (aggregated): " + err.Error()
		}
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(raw, &list); err != nil || list.Kind != "APIGroupDiscoveryList" {
			return fmt.Sprintf("GET /apis answers no APIGroupDiscoveryList (%v): %.200s", err, raw)
		}
		var stale []string
		resources := ""
		for _, g := range list.Items {
			for _, v := range g.Versions {
				if v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale {
					stale = append(stale, g.Name+"/"+v.Version)
				}
				if g.Name == "metrics.k8s.io" && v.Version == "v1beta1" {
					for _, r := range v.Resources {
						resources += " " + r.Resource
					}
				}
			}
		}
		if len(stale) > 0 {
			return fmt.Sprintf("stale groups in aggregated discovery (client-go drops them): %v", stale)
		}
		if !strings.Contains(resources+" ", " nodes ") || !strings.Contains(resources+" ", " pods ") {
			return fmt.Sprintf("metrics.k8s.io/v1beta1 in aggregated discovery has resources [%s], want nodes and pods", resources)
		}
		return ""
	})
}

// kubectlTop runs the kubectl hack/tools builds (a current one: it reads
// aggregated discovery) as a user would, with a discovery cache of its
// own: `kubectl top nodes` shows every node, Linux and Windows, and
// `kubectl top pods -A` a pod on each OS.
func kubectlTop(ctx context.Context, t *testing.T, kubeconfig []byte, bin string, cs kubernetes.Interface) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", path}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "KUBECACHEDIR="+filepath.Join(dir, "cache"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// rows is each NAME's row of a kubectl top table (the column nameCol).
	rows := func(out string, nameCol int) map[string]string {
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if f := strings.Fields(l); len(f) > nameCol {
				got[f[nameCol]] = l
			}
		}
		return got
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		out, err := kubectl("top", "nodes")
		if err != nil {
			return fmt.Sprintf("kubectl top nodes: %v: %s", err, out)
		}
		got := rows(out, 0)
		for _, n := range nodes.Items {
			if l, ok := got[n.Name]; !ok || strings.Contains(l, "<unknown>") {
				return fmt.Sprintf("kubectl top nodes has no usage for %s (%s):\n%s", n.Name, n.Labels[corev1.LabelOSStable], out)
			}
		}
		return ""
	})
	nodeOS := map[string]string{}
	for _, n := range nodes.Items {
		nodeOS[n.Name] = n.Labels[corev1.LabelOSStable]
	}
	poll.Until(t, time.Minute, func() string {
		out, err := kubectl("top", "pods", "-A")
		if err != nil {
			return fmt.Sprintf("kubectl top pods -A: %v: %s", err, out)
		}
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		got := rows(out, 1)
		seen := map[string]string{}
		for _, p := range pods.Items {
			if _, ok := got[p.Name]; ok && nodeOS[p.Spec.NodeName] != "" {
				seen[nodeOS[p.Spec.NodeName]] = p.Namespace + "/" + p.Name
			}
		}
		if seen["linux"] == "" || seen["windows"] == "" {
			return fmt.Sprintf("kubectl top pods -A shows no pod of a Linux and a Windows node (%v):\n%s", seen, out)
		}
		return ""
	})
}

// metricsServerState says where the metrics-server add-on is, for a
// failure's message: its pods and its APIService's condition.
func metricsServerState(ctx context.Context, cs kubernetes.Interface) string {
	var out []string
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=metrics-server"})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		st := string(p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Waiting != nil {
				st += " " + c.State.Waiting.Reason + ": " + c.State.Waiting.Message
			}
			if c.State.Terminated != nil {
				st += fmt.Sprintf(" exited %d: %s", c.State.Terminated.ExitCode, c.State.Terminated.Message)
			}
		}
		out = append(out, fmt.Sprintf("pod %s on %s: %s ready=%v", p.Name, p.Spec.NodeName, st, podIsReady(&p)))
	}
	if len(pods.Items) == 0 {
		out = append(out, "no metrics-server pod")
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io").DoRaw(ctx)
	if err != nil {
		out = append(out, "APIService: "+err.Error())
	} else if i := strings.Index(string(raw), `"conditions"`); i >= 0 {
		out = append(out, "APIService "+string(raw[i:]))
	}
	return strings.Join(out, "; ")
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
