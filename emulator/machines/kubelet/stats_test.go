package kubelet

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// statsNode is a kubelet of one OS on a shared API server.
type statsNode struct {
	name string
	addr netip.Addr
	// admin is the test's administrator's client certificate, which the
	// kubelet's client CA covers: metrics-server and kubectl reach the
	// kubelet with credentials, never anonymously.
	admin tls.Certificate
}

func startStatsNode(t *testing.T, env *testenv.Env, images Images, name string, host Host) statsNode {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(env.Config)
	admin, err := tls.X509KeyPair(env.Config.CertData, env.Config.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	n := statsNode{name: name, addr: testAddress(t), admin: admin}
	host.KubeletVersion = "v1.36.3"
	k, err := Start(context.Background(), Config{
		NodeName: name, Client: client, ClientCA: env.KubeletClientCA, Address: n.addr, Host: host, Images: images,
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
		NodeInfo: corev1.NodeSystemInfo{OperatingSystem: host.OS, Architecture: "amd64", KubeletVersion: "v1.36.3"},
		Log:      logr.Discard(), NetworkConfigured: func() bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	cidr := map[string]string{"linux": "10.244.1.0/24", "windows": "10.244.2.0/24"}[host.OS]
	if _, err := client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(`{"spec":{"podCIDR":"`+cidr+`","podCIDRs":["`+cidr+`"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n statsNode) get(t *testing.T, path string) (*http.Response, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{n.admin}}}} //nolint:gosec // the kubelet's certificate is self-signed
	resp, err := c.Get("https://" + net.JoinHostPort(n.addr.String(), "10250") + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return resp, b
}

func (n statsNode) metrics(t *testing.T) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	_, b := n.get(t, "/metrics/resource")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("parsing /metrics/resource: %v\n%s", err, b)
	}
	return fams, string(b)
}

// sample finds the metric of a family with the given labels.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		match := true
		for k, v := range labels {
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			match = match && found
		}
		if match {
			return m
		}
	}
	return nil
}

func runPod(t *testing.T, client kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Status.Phase != corev1.PodRunning {
			return "pod " + p.Name + " is " + string(p.Status.Phase)
		}
		return ""
	})
}

// cpuRate is a container's CPU usage between two scrapes, in cores, as a
// consumer computes it from the counter and the samples' timestamps.
func cpuRate(a, b *dto.Metric) float64 {
	return (b.GetCounter().GetValue() - a.GetCounter().GetValue()) / (float64(b.GetTimestampMs()-a.GetTimestampMs()) / 1000)
}

// TestResourceMetricsAndSummary: a Linux and a Windows node serve the
// kubelet's resource metrics and Summary from their pods' requests and
// limits, labelled simulated; the CPU counters grow at the modelled rate,
// which the pod's annotation changes.
func TestResourceMetricsAndSummary(t *testing.T) {
	// Its seconds are mostly sleeps between two scrapes (a rate needs
	// time to pass); its Nodes (stats-*) and pods are its own names on
	// the shared API server, so it sleeps beside the other parallel tests.
	t.Parallel()
	env := apiServer.Env(t)
	client := kubernetes.NewForConfigOrDie(env.Config)
	images := startRegistry(t)
	lin := startStatsNode(t, env, images, "stats-linux", linux)
	win := startStatsNode(t, env, images, "stats-windows", win2022)

	req := func(cpu, mem string, limits corev1.ResourceList) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}, Limits: limits}
	}
	runPod(t, client, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: map[string]string{CPUUtilizationAnnotation: "180"}},
		Spec: corev1.PodSpec{NodeName: lin.name, Containers: []corev1.Container{
			{Name: "app", Image: "docker.io/library/nginx:1.27", Resources: req("250m", "64Mi", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")})},
			{Name: "side", Image: "docker.io/library/busybox:1.36"},
		}}})
	runPod(t, client, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "iis", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: win.name, OS: &corev1.PodOS{Name: corev1.Windows}, Containers: []corev1.Container{
			{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022", Resources: req("500m", "256Mi", nil)},
		}}})

	t.Run("LinuxFromRequests", func(t *testing.T) {
		fams, text := lin.metrics(t)
		if !strings.HasPrefix(text, SimulatedComment+"\n") {
			t.Errorf("the text does not start with the simulation's comment:\n%.300s", text)
		}
		if h := fams["container_cpu_usage_seconds_total"].GetHelp(); h != "[STABLE] Cumulative cpu time consumed by the container in core-seconds" {
			t.Errorf("help %q", h)
		}
		if fams["container_cpu_usage_seconds_total"].GetType() != dto.MetricType_COUNTER {
			t.Errorf("container_cpu_usage_seconds_total is a %v", fams["container_cpu_usage_seconds_total"].GetType())
		}
		if _, ok := fams["scrape_error"]; ok {
			t.Error("scrape_error is served, though a 1.36 kubelet hides it")
		}
		if m := sample(fams, "resource_scrape_error", nil); m == nil || m.GetGauge().GetValue() != 0 {
			t.Errorf("resource_scrape_error: %v", m)
		}
		app := map[string]string{"container": "app", "pod": "web", "namespace": "default"}
		side := map[string]string{"container": "side", "pod": "web", "namespace": "default"}
		if m := sample(fams, "container_memory_working_set_bytes", app); m == nil || m.GetGauge().GetValue() != 64<<20 {
			t.Errorf("app's working set: %v, want its request, 64Mi", m)
		}
		if m := sample(fams, "container_memory_working_set_bytes", side); m == nil || m.GetGauge().GetValue() != 32<<20 {
			t.Errorf("side's working set: %v, want the default, 32Mi", m)
		}
		if m := sample(fams, "pod_memory_working_set_bytes", map[string]string{"pod": "web"}); m == nil || m.GetGauge().GetValue() != 96<<20 {
			t.Errorf("pod's working set: %v, want 96Mi", m)
		}
		if m := sample(fams, "node_memory_working_set_bytes", nil); m == nil || m.GetGauge().GetValue() != (512+96)<<20 {
			t.Errorf("node's working set: %v, want the system's 512Mi and the pod's 96Mi", m)
		}
		if m := sample(fams, "container_start_time_seconds", app); m == nil || m.GetGauge().GetValue() < float64(time.Now().Add(-5*time.Minute).Unix()) {
			t.Errorf("app's start time: %v", m)
		}
		if sample(fams, "container_swap_usage_bytes", app) == nil || sample(fams, "node_swap_usage_bytes", nil) == nil {
			t.Error("a Linux node reports no swap usage")
		}
	})

	t.Run("CountersGrowAtTheModelledRate", func(t *testing.T) {
		app := map[string]string{"container": "app", "pod": "web", "namespace": "default"}
		side := map[string]string{"container": "side", "pod": "web", "namespace": "default"}
		a, _ := lin.metrics(t)
		time.Sleep(1100 * time.Millisecond)
		b, _ := lin.metrics(t)
		// 180% of 250m is 450m, under the 500m limit.
		if r := cpuRate(sample(a, "container_cpu_usage_seconds_total", app), sample(b, "container_cpu_usage_seconds_total", app)); math.Abs(r-0.45) > 0.005 {
			t.Errorf("app's CPU rate %.4f, want 0.45", r)
		}
		// 180% of the 10m default.
		if r := cpuRate(sample(a, "container_cpu_usage_seconds_total", side), sample(b, "container_cpu_usage_seconds_total", side)); math.Abs(r-0.018) > 0.0005 {
			t.Errorf("side's CPU rate %.4f, want 0.018", r)
		}
		if r := cpuRate(sample(a, "node_cpu_usage_seconds_total", nil), sample(b, "node_cpu_usage_seconds_total", nil)); math.Abs(r-0.568) > 0.005 {
			t.Errorf("node's CPU rate %.4f, want 0.1 + 0.45 + 0.018", r)
		}

		// 400% would be 1 core: the limit caps it at 500m.
		ctx := context.Background()
		if _, err := client.CoreV1().Pods("default").Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+CPUUtilizationAnnotation+`":"400"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		last := sample(b, "container_cpu_usage_seconds_total", app)
		poll.Until(t, 30*time.Second, func() string {
			time.Sleep(500 * time.Millisecond)
			fams, _ := lin.metrics(t)
			m := sample(fams, "container_cpu_usage_seconds_total", app)
			if m.GetCounter().GetValue() < last.GetCounter().GetValue() {
				t.Fatalf("the counter went back from %v to %v", last.GetCounter().GetValue(), m.GetCounter().GetValue())
			}
			r := cpuRate(last, m)
			last = m
			if math.Abs(r-0.5) > 0.005 {
				return "app's CPU rate is " + resource.NewMilliQuantity(int64(r*1000), resource.DecimalSI).String() + ", not yet the 500m limit"
			}
			return ""
		})
	})

	t.Run("InvalidLoadIsAnEvent", func(t *testing.T) {
		ctx := context.Background()
		runPod(t, client, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "odd", Namespace: "default", Annotations: map[string]string{CPUUtilizationAnnotation: "lots"}},
			Spec: corev1.PodSpec{NodeName: lin.name, Containers: []corev1.Container{{Name: "app", Image: "docker.io/library/busybox:1.36", Resources: req("100m", "16Mi", nil)}}}})
		fams, _ := lin.metrics(t)
		a := sample(fams, "container_cpu_usage_seconds_total", map[string]string{"pod": "odd"})
		time.Sleep(1100 * time.Millisecond)
		fams, _ = lin.metrics(t)
		if r := cpuRate(a, sample(fams, "container_cpu_usage_seconds_total", map[string]string{"pod": "odd"})); math.Abs(r-0.1) > 0.002 {
			t.Errorf("odd's CPU rate %.4f, want its request, 0.1", r)
		}
		poll.Until(t, 30*time.Second, func() string {
			evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=odd,reason=InvalidSimulatedLoad"})
			if err != nil || len(evs.Items) == 0 {
				return "no InvalidSimulatedLoad event yet"
			}
			if !strings.Contains(evs.Items[0].Message, `="lots" is not a whole number of percent`) {
				t.Fatalf("event %q", evs.Items[0].Message)
			}
			return ""
		})
		if err := client.CoreV1().Pods("default").Delete(ctx, "odd", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LoadAnnotationsTakeTheEmulatorsPrefix", func(t *testing.T) {
		// The emulator's knobs share one prefix; the names the README gave
		// before still work, with a warning Event saying the new name.
		ctx := context.Background()
		for name, ann := range map[string]string{"prefixed": "emulator.winkube.dev/cpu-utilization", "legacy": "winkube.dev/simulated-cpu-utilization"} {
			runPod(t, client, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{ann: "300"}},
				Spec: corev1.PodSpec{NodeName: lin.name, Containers: []corev1.Container{{Name: "app", Image: "docker.io/library/busybox:1.36", Resources: req("100m", "16Mi", nil)}}}})
			t.Cleanup(func() { _ = client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}) })
		}
		for _, name := range []string{"prefixed", "legacy"} {
			pod := map[string]string{"pod": name}
			fams, _ := lin.metrics(t)
			first := sample(fams, "container_cpu_usage_seconds_total", pod)
			// The counter is the model's rate times the time between two
			// reads: any two reads at distinct times give the rate.
			poll.Until(t, 30*time.Second, func() string {
				fams, _ := lin.metrics(t)
				m := sample(fams, "container_cpu_usage_seconds_total", pod)
				if m.GetTimestampMs() <= first.GetTimestampMs()+100 {
					return "waiting for a later read"
				}
				if r := cpuRate(first, m); math.Abs(r-0.3) > 0.005 {
					t.Fatalf("%s's CPU rate %.4f, want 300%% of its 100m request", name, r)
				}
				return ""
			})
		}
		poll.Until(t, 30*time.Second, func() string {
			evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=legacy,reason=DeprecatedSimulatedLoad"})
			if err != nil || len(evs.Items) == 0 {
				return "no DeprecatedSimulatedLoad event yet"
			}
			if want := "annotation winkube.dev/simulated-cpu-utilization is deprecated: rename it emulator.winkube.dev/cpu-utilization"; evs.Items[0].Message != want {
				t.Fatalf("event %q, want %q", evs.Items[0].Message, want)
			}
			return ""
		})
	})

	t.Run("WindowsServesToo", func(t *testing.T) {
		fams, _ := win.metrics(t)
		iis := map[string]string{"container": "iis", "pod": "iis", "namespace": "default"}
		if m := sample(fams, "container_memory_working_set_bytes", iis); m == nil || m.GetGauge().GetValue() != 256<<20 {
			t.Errorf("iis's working set: %v, want 256Mi", m)
		}
		if m := sample(fams, "node_memory_working_set_bytes", nil); m == nil || m.GetGauge().GetValue() != (1536+256)<<20 {
			t.Errorf("node's working set: %v, want 1.5Gi + 256Mi", m)
		}
		for _, f := range []string{"node_swap_usage_bytes", "container_swap_usage_bytes", "pod_swap_usage_bytes"} {
			if _, ok := fams[f]; ok {
				t.Errorf("a Windows node reports %s", f)
			}
		}

		resp, body := win.get(t, "/stats/summary")
		if resp.Header.Get(SimulatedHeader) != "true" {
			t.Errorf("the Summary's answer lacks %s", SimulatedHeader)
		}
		var s statsapi.Summary
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatal(err)
		}
		if s.Node.NodeName != win.name || s.Node.Swap != nil || len(s.Pods) != 1 || len(s.Pods[0].Containers) != 1 {
			t.Fatalf("summary %s", body)
		}
		c := s.Pods[0].Containers[0]
		if c.Memory == nil || c.Memory.RSSBytes != nil || c.Swap != nil || c.Memory.WorkingSetBytes == nil || *c.Memory.WorkingSetBytes != 256<<20 {
			t.Errorf("a Windows container's memory stats: %+v swap %+v", c.Memory, c.Swap)
		}
		if c.CPU == nil || c.CPU.UsageNanoCores == nil || *c.CPU.UsageNanoCores != 500_000_000 {
			t.Errorf("iis's CPU: %+v", c.CPU)
		}
		if len(c.UserDefinedMetrics) != 1 || c.UserDefinedMetrics[0].Name != SimulatedMetric {
			t.Errorf("no simulated marker: %+v", c.UserDefinedMetrics)
		}

		_, body = lin.get(t, "/stats/summary")
		var ls statsapi.Summary
		if err := json.Unmarshal(body, &ls); err != nil {
			t.Fatal(err)
		}
		// The pod of InvalidLoadIsAnEvent may still be going.
		var web *statsapi.PodStats
		for i := range ls.Pods {
			if ls.Pods[i].PodRef.Name == "web" {
				web = &ls.Pods[i]
			}
		}
		if ls.Node.Swap == nil || web == nil || web.Containers[0].Memory.RSSBytes == nil {
			t.Errorf("a Linux node's summary lacks rss or swap: %s", body)
		}
	})
}
