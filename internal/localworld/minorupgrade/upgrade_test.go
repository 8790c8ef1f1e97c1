//go:build e2e

package minorupgrade_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/vmimages"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/upgrade"
	"github.com/winkube/winkube/localports"
)

const (
	ns = "default"
	// windowsServer2022 is Windows Server 2022's build, which the pool's
	// nodes keep through the upgrade.
	windowsServer2022 = "10.0.20348"
)

// TestUpgradeMixedCluster is issue 49's rehearsal: a mixed cluster (one
// control plane, a Linux MachineDeployment, a Windows MachinePool of two)
// booted at the previous minor is upgraded to the current one, control
// plane first, then the MachineDeployment on a new template, then the
// MachinePool. The seeds' IIS behind its LoadBalancer Service, two replicas
// with a PodDisruptionBudget, is asked for its page every two seconds
// throughout; no two requests in a row may fail. At the end every node runs
// the target, kube-proxy-windows and the cloud node manager run the
// target's images, no Windows node left Windows Server 2022, and the old
// VMs are gone from Azure.
func TestUpgradeMixedCluster(t *testing.T) {
	testenv.SkipIfShort(t, "a booted local world")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	from, to := localworld.PreviousKubernetesVersion, localworld.KubernetesVersion
	// The previous minor's control plane is built on request only.
	if _, err := os.Stat(filepath.Join(bin, from, "kube-apiserver")); err != nil {
		t.Fatalf("this test boots the cluster at %s, whose control-plane binaries are missing from %s: run `make tools-previous` (or `make test`, which builds it) first (%v)", from, filepath.Join(bin, from), err)
	}
	if os.Getenv("WINKUBE_TEST_LOGS") != "" {
		log.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	} else {
		// The world logs through log.Log: without a sink set,
		// controller-runtime prints a stack trace after 30 s instead.
		log.SetLogger(logr.Discard())
	}
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("%6.1fs %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	o := localworld.Options{
		Name: "upg", Flavor: flavors.MachinePoolWindows, KubernetesVersion: from, ControlPlaneNodes: 1, LinuxNodes: 1, WindowsNodes: 2,
		WindowsVersion: infrav1.WindowsServer2022, StateDir: t.TempDir(), Bin: bin, Log: log.Log,
		Progress: func(s string) { logf("%s", s) },
	}
	limit := 18 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("WINKUBE_TEST_LIMIT")); err == nil {
		limit = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	w, err := localworld.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.CreateCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	wc, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	builds := map[string]string{} // Windows node -> build
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if v := n.Status.NodeInfo.KubeletVersion; v != from {
			t.Fatalf("node %s runs kubelet %s before the upgrade, want %s", n.Name, v, from)
		}
		if n.Labels[corev1.LabelOSStable] == "windows" {
			builds[n.Name] = n.Labels[corev1.LabelWindowsBuild]
		}
	}
	for n, b := range builds {
		if b != windowsServer2022 {
			t.Fatalf("Windows node %s has build %s, want Windows Server 2022's %s", n, b, windowsServer2022)
		}
	}
	if len(nodes.Items) != 4 || len(builds) != 2 {
		t.Fatalf("%d nodes of which %d Windows, want 4 of which 2", len(nodes.Items), len(builds))
	}
	if v := apiServerVersion(t, cs); v != from {
		t.Fatalf("the workload API server says %s, want %s", v, from)
	}
	oldVMs := vmIDs(ctx, t, w.Client, o.Name)
	logf("cluster at %s: %d nodes, Windows builds %v, VMs %d", from, len(nodes.Items), builds, len(oldVMs))

	ip := serveIIS(ctx, t, cs, wc)
	logf("IIS answers at http://%s/ with 2 replicas and a budget of one unavailable", ip)
	sampler := sample(ip, 2*time.Second)
	began := time.Now()
	upgradeCluster(ctx, t, w, wc, o, to, logf)
	took := time.Since(began)
	samples := sampler.stop()
	logf("upgraded %s -> %s in %s", from, to, took.Round(time.Second))

	failed, window := 0, 0
	for i, s := range samples {
		if s.err == nil {
			continue
		}
		failed++
		t.Logf("request at %s failed: %v", s.at.Sub(began).Round(time.Millisecond), s.err)
		if i > 0 && samples[i-1].err != nil {
			window++
		}
	}
	t.Logf("IIS sampled %d times during the upgrade, %d failed", len(samples), failed)
	if len(samples) < 10 {
		t.Errorf("only %d samples during the upgrade: too few to say IIS stayed up", len(samples))
	}
	if window > 0 {
		t.Errorf("IIS was down for two or more requests in a row (%d times) during the upgrade, which its budget forbids", window)
	}

	if v := apiServerVersion(t, cs); v != to {
		t.Errorf("the workload API server says %s after the upgrade, want %s", v, to)
	}
	nodes, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	windows := 0
	for _, n := range nodes.Items {
		if v := n.Status.NodeInfo.KubeletVersion; v != to {
			t.Errorf("node %s runs kubelet %s after the upgrade, want %s", n.Name, v, to)
		}
		if n.Labels[corev1.LabelOSStable] != "windows" {
			continue
		}
		windows++
		if b := n.Labels[corev1.LabelWindowsBuild]; b != windowsServer2022 {
			t.Errorf("Windows node %s has build %s after the upgrade; the nodes before had %v", n.Name, b, builds)
		}
	}
	if len(nodes.Items) != 4 || windows != 2 {
		t.Errorf("%d nodes of which %d Windows after the upgrade, want 4 of which 2", len(nodes.Items), windows)
	}
	checkAddonImages(ctx, t, cs, to)
	left := map[string]bool{}
	for _, id := range w.Emulator().ResourceIDs() {
		left[strings.ToLower(id)] = true
	}
	for _, id := range oldVMs {
		if left[strings.ToLower(id)] {
			t.Errorf("the old VM %s is still in Azure", id)
		}
	}
}

// upgradeCluster moves the cluster to version to as `winkube plan upgrade
// --to <to> --apply` does: it plans with the cluster's nodes and budgets and
// the emulator's image catalog, logs the plan as the command prints it, and
// runs it with upgrade.Run: the control plane (Cluster API's
// KubeadmControlPlane rolls its machines one by one), then each
// MachineDeployment on a new AzureMachineTemplate, then each MachinePool,
// waiting for each. The add-ons bound to the version follow on their own
// (internal/controllers' AddonVersionReconciler).
func upgradeCluster(ctx context.Context, t *testing.T, w *localworld.World, wc client.Client, o localworld.Options, to string, logf func(string, ...any)) {
	t.Helper()
	// The local world does not run Cluster API's defaulting webhooks,
	// which give every KubeadmControlPlane a RollingUpdate strategy with
	// maxSurge 1 (Default in controlplane/kubeadm/webhooks/admission/kubeadmcontrolplane.go,
	// kubernetes-sigs/cluster-api v1.14.2); without them the provider rolls
	// nothing ("RolloutStrategy type is not set"). A real management
	// cluster has it already, so upgrade.Run does not set it.
	update(ctx, t, w.Client, &controlplanev1.KubeadmControlPlane{}, o.Name+"-control-plane", func(obj client.Object) {
		kcp := obj.(*controlplanev1.KubeadmControlPlane)
		kcp.Spec.Rollout.Strategy.Type = controlplanev1.RollingUpdateStrategyType
		if kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge == nil {
			kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
		}
	})
	acfg, err := w.AsServicePrincipal()
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := vmimages.New(localworld.Subscription, acfg)
	if err != nil {
		t.Fatal(err)
	}
	steps := &stepTimer{logf: logf}
	opts := upgrade.Options{Management: w.Client, Workload: wc, Namespace: ns, ClusterName: o.Name, Target: to, Images: catalog, Progress: steps}
	plan, err := upgrade.Build(ctx, opts)
	if err != nil {
		t.Fatalf("planning the upgrade to %s: %v", to, err)
	}
	var text strings.Builder
	if err := plan.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("winkube plan upgrade --to %s:\n%s", to, text.String())
	if code := plan.ExitCode(); code == 2 {
		t.Fatalf("the plan to %s has errors (exit status 2):\n%s", to, text.String())
	}
	var order []string
	for _, st := range plan.Steps {
		order = append(order, st.Kind+"/"+st.OS)
	}
	if want := "KubeadmControlPlane/linux MachineDeployment/linux MachinePool/windows"; strings.Join(order, " ") != want {
		t.Fatalf("the plan's steps are %v, want %s: the control plane, then Linux, then Windows", order, want)
	}
	if _, err := upgrade.Run(ctx, opts); err != nil {
		t.Fatalf("upgrade to %s: %v", to, err)
	}
}

// stepTimer turns upgrade.Run's progress lines into test log lines, and
// logs how long each step took from its first line ("[2/3] ... ->") to the
// one saying its machines run the target.
type stepTimer struct {
	logf    func(string, ...any)
	started map[string]time.Time
}

func (s *stepTimer) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		s.logf("%s", line)
		step, _, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(step, "[") {
			continue
		}
		if s.started == nil {
			s.started = map[string]time.Time{}
		}
		if _, seen := s.started[step]; !seen {
			s.started[step] = time.Now()
		} else if strings.Contains(line, "every machine runs") {
			s.logf("step %s took %s", step, time.Since(s.started[step]).Round(time.Second))
		}
	}
	return len(p), nil
}

// update changes one management object, again on a conflict.
func update(ctx context.Context, t *testing.T, c client.Client, obj client.Object, name string, change func(client.Object)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return err
		}
		change(obj)
		return c.Update(ctx, obj)
	})
	if err != nil {
		t.Fatalf("updating %T %s: %v", obj, name, err)
	}
}

// vmIDs are the Azure IDs of the cluster's VMs and scale-set instances, as
// its Machines and MachinePools name them.
func vmIDs(ctx context.Context, t *testing.T, c client.Client, cluster string) []string {
	t.Helper()
	var out []string
	ms := &clusterv1.MachineList{}
	if err := c.List(ctx, ms, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Items {
		out = append(out, strings.TrimPrefix(m.Spec.ProviderID, "azure://"))
	}
	mps := &clusterv1.MachinePoolList{}
	if err := c.List(ctx, mps, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		t.Fatal(err)
	}
	for _, mp := range mps.Items {
		for _, id := range mp.Spec.ProviderIDList {
			out = append(out, strings.TrimPrefix(id, "azure://"))
		}
	}
	return out
}

func apiServerVersion(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v.GitVersion
}

// checkAddonImages: kube-proxy-windows and every cloud node manager run the
// images of version to, in their DaemonSets and in each of their pods.
func checkAddonImages(ctx context.Context, t *testing.T, cs kubernetes.Interface, to string) {
	t.Helper()
	v, err := images.ParseVersion(to)
	if err != nil {
		t.Fatal(err)
	}
	_, cnm, ok := flavors.CloudProviderAzureImages(v.Minor)
	if !ok {
		t.Fatalf("no cloud-provider-azure release for %s", to)
	}
	proxy := "docker.io/sigwindowstools/kube-proxy:" + to + "-calico-hostprocess"
	want := map[string]string{} // DaemonSet -> image
	dss, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ds := range dss.Items {
		for _, c := range ds.Spec.Template.Spec.Containers {
			switch {
			case ds.Name == "kube-proxy-windows":
				want[ds.Name] = proxy
			case strings.Contains(c.Image, "/azure-cloud-node-manager:"):
				want[ds.Name] = cnm
			}
		}
	}
	if want["kube-proxy-windows"] == "" || len(want) < 2 {
		t.Fatalf("kube-system has DaemonSets %v: want kube-proxy-windows and the cloud node managers", want)
	}
	poll.Until(t, 3*time.Minute, func() string {
		for name, image := range want {
			ds, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if got := ds.Spec.Template.Spec.Containers[0].Image; got != image {
				return fmt.Sprintf("DaemonSet %s runs %s, want %s", name, got, image)
			}
			pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
			if err != nil {
				return err.Error()
			}
			if int32(len(pods.Items)) != ds.Status.DesiredNumberScheduled || len(pods.Items) == 0 {
				return fmt.Sprintf("DaemonSet %s: %d pods, %d scheduled", name, len(pods.Items), ds.Status.DesiredNumberScheduled)
			}
			for _, p := range pods.Items {
				if p.Spec.Containers[0].Image != image || p.Status.Phase != corev1.PodRunning {
					return fmt.Sprintf("pod %s of %s on %s: %s, %s", p.Name, name, p.Spec.NodeName, p.Spec.Containers[0].Image, p.Status.Phase)
				}
			}
		}
		return ""
	})
}

// serveIIS runs the seeds' IIS example (examples/iis.yaml) with two
// replicas, at most one of which may be disrupted, and returns its Service's
// external IP once a request answers.
func serveIIS(ctx context.Context, t *testing.T, cs kubernetes.Interface, wc client.Client) string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "examples", "iis.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		u.SetNamespace(ns)
		if u.GetKind() == "Deployment" {
			if err := unstructured.SetNestedField(u.Object, int64(2), "spec", "replicas"); err != nil {
				t.Fatal(err)
			}
		}
		if err := wc.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iis"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "iis-2022"}}}}
	if err := wc.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	var ip string
	poll.Until(t, 4*time.Minute, func() string {
		d := &appsv1.Deployment{}
		if err := wc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "iis-2022"}, d); err != nil {
			return err.Error()
		}
		if d.Status.ReadyReplicas != 2 {
			return fmt.Sprintf("IIS: %d of 2 replicas ready", d.Status.ReadyReplicas)
		}
		svc, err := cs.CoreV1().Services(ns).Get(ctx, "iis", metav1.GetOptions{})
		if err != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Sprintf("Service iis has no external IP (%v)", err)
		}
		ip = svc.Status.LoadBalancer.Ingress[0].IP
		if err := get(ip); err != nil {
			return err.Error()
		}
		return ""
	})
	return ip
}

// get asks http://ip/ for its page on a new connection, as a client from
// outside does; port 80 of a loopback address is served at its alternate
// when this process may not bind it (localports), so both are tried.
func get(ip string) error {
	var last error
	for _, addr := range localports.Candidates(net.JoinHostPort(ip, "80")) {
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			last = err
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", addr, resp.StatusCode)
		}
		return nil
	}
	return last
}

type sampleResult struct {
	at  time.Time
	err error
}

type sampling struct {
	mu      sync.Mutex
	results []sampleResult
	done    chan struct{}
	stopped chan struct{}
}

// sample asks ip for its page every interval until stopped.
func sample(ip string, interval time.Duration) *sampling {
	s := &sampling{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			at := time.Now()
			err := get(ip)
			s.mu.Lock()
			s.results = append(s.results, sampleResult{at: at, err: err})
			s.mu.Unlock()
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampling) stop() []sampleResult {
	close(s.done)
	<-s.stopped
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.results
}
