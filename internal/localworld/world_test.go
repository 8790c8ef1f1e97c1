package localworld_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// windowsNodes lists the Ready Windows nodes and their kubelet versions.
func windowsNodes(ctx context.Context, cs kubernetes.Interface) (map[string]string, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/os=windows"})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		if util.IsNodeReady(&n) {
			out[n.Name] = n.Status.NodeInfo.KubeletVersion
		}
	}
	return out, nil
}

func nodeNames(ctx context.Context, t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// machinesFindTheirNodes waits for every Machine to have its node, found by
// Cluster API by exact provider ID, and checks that the cloud node manager
// wrote the world's resource group (with capitals) in lower case.
func machinesFindTheirNodes(ctx context.Context, t *testing.T, w *localworld.World, cs kubernetes.Interface) {
	t.Helper()
	poll.Until(t, 2*time.Minute, func() string {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		byID := map[string]string{}
		for _, n := range nodes.Items {
			if !strings.Contains(n.Spec.ProviderID, "/resourceGroups/e2e-group/") {
				return fmt.Sprintf("node %s has provider ID %q: cloud-provider-azure writes the group in lower case", n.Name, n.Spec.ProviderID)
			}
			byID[n.Spec.ProviderID] = n.Name
		}
		ms := &clusterv1.MachineList{}
		if err := w.Client.List(ctx, ms); err != nil {
			return err.Error()
		}
		for _, m := range ms.Items {
			if m.Status.NodeRef.Name == "" || byID[m.Spec.ProviderID] != m.Status.NodeRef.Name {
				return fmt.Sprintf("machine %s (provider ID %q) has node %q; the nodes are %v", m.Name, m.Spec.ProviderID, m.Status.NodeRef.Name, byID)
			}
		}
		return ""
	})
}

// TestUpAndDown is issue 9's end-to-end run: a mixed cluster of one
// control plane, one Linux and two Windows workers comes up through the
// real Cluster API controllers; the IIS example runs on Windows; the
// Windows MachineDeployment scales and rolls to another version; deleting
// the cluster leaves nothing behind.
func TestUpAndDown(t *testing.T) {
	testenv.SkipIfShort(t, "a booted local world")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("WINKUBE_TEST_LOGS") != "" {
		log.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	start := time.Now()
	state := t.TempDir()
	o := localworld.Options{
		Name: "e2e", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3", ControlPlaneNodes: 1, LinuxNodes: 1, WindowsNodes: 2,
		WindowsVersion: infrav1.WindowsServer2022, StateDir: state, Bin: bin,
		// A group with capitals, as Azure users name them: the simulated
		// cloud node manager lower-cases it in provider IDs, as
		// cloud-provider-azure does, and Machines must still find nodes.
		ResourceGroup: "E2E-Group",
		// The flavors' metrics-server add-on, for kubectl top and the HPA.
		MetricsServer: true,
		// Short enough that Cluster API rotates the MachinePool's join
		// token within the test (at half of it); a worker that has not
		// joined yet has its token refreshed every third of it.
		JoinTokenTTL: time.Minute,
		Progress:     func(s string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), s) },
		Log:          log.Log,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	w, err := localworld.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			w.Stop()
		}
	}()
	if _, err := localworld.Start(ctx, o); err == nil || !strings.Contains(err.Error(), "in use by another winkube") {
		t.Fatalf("a second winkube on the same state directory: %v", err)
	}
	if err := w.CreateCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("all nodes Ready after %s", time.Since(start).Round(time.Second))
	cfg, kubeconfig, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	machinesFindTheirNodes(ctx, t, w, cs)
	nodesBefore := nodeNames(ctx, t, cs)

	// Stop and start again on the same state: the same cluster comes back
	// (same machines, same nodes), nothing is created twice.
	w.Stop()
	if w, err = localworld.Start(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := w.CreateCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if after := nodeNames(ctx, t, cs); after != nodesBefore {
		t.Fatalf("nodes after the restart %s, before %s", after, nodesBefore)
	}
	ms := &clusterv1.MachineList{}
	if err := w.Client.List(ctx, ms); err != nil || len(ms.Items) != 4 {
		t.Fatalf("machines after the restart: %d (%v), want the 4 of before", len(ms.Items), err)
	}
	t.Logf("%6.1fs resumed the same cluster after a stop", time.Since(start).Seconds())
	wc, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	// The IIS example: scheduled on Windows nodes only, Running.
	root, _ := testenv.ModuleRoot()
	f, err := os.Open(filepath.Join(root, "examples", "iis.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		u.SetNamespace("default")
		if err := wc.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	poll.Until(t, 2*time.Minute, func() string {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=iis-2022"})
		if err != nil || len(pods.Items) == 0 {
			return fmt.Sprintf("no IIS pod: %v", err)
		}
		wins, _ := windowsNodes(ctx, cs)
		for _, p := range pods.Items {
			if _, ok := wins[p.Spec.NodeName]; !ok || p.Status.Phase != corev1.PodRunning {
				return fmt.Sprintf("IIS pod %s on %q is %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
		}
		svc, err := cs.CoreV1().Services("default").Get(ctx, "iis", metav1.GetOptions{})
		if err != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return "Service iis has no external IP"
		}
		return ""
	})

	startAutoscaling(ctx, t, cs)

	// Workload admission, served in this process for the pods of the
	// admission Deployment: the seeds' iis-1809 (ltsc2019) on this
	// 2022-only cluster stays Pending, with an event that says which build
	// it needs and how to get one.
	if err := w.WaitAdmissionServed(ctx); err != nil {
		t.Fatal(err)
	}
	iis1809 := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "iis-1809"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "iis-1809"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "iis-1809"}}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelOSStable: "windows"},
			Containers:   []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"}}}}}}
	if err := wc.Create(ctx, iis1809); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=iis-1809"})
		if err != nil || len(pods.Items) != 1 {
			return fmt.Sprintf("iis-1809 pods: %v", err)
		}
		p := pods.Items[0]
		if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
			return fmt.Sprintf("iis-1809 pod on %q is %s, want Pending", p.Spec.NodeName, p.Status.Phase)
		}
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			return err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "NoWindowsNodeOfBuild" && strings.Contains(e.Message, "10.0.17763") && strings.Contains(e.Message, "winkube up --windows-version 2019") {
				return ""
			}
		}
		return fmt.Sprintf("no event explains the pending iis-1809 pod (%d events)", len(evs.Items))
	})
	t.Logf("%6.1fs iis-1809 stays Pending on a 2022-only cluster, explained", time.Since(start).Seconds())
	stepStart := time.Now()
	checkLoadedImage(ctx, t, state, cs, start)
	checkHostProcessJobs(ctx, t, cs, start)
	t.Logf("loading an image and running it, and the HostProcess jobs, took %s", time.Since(stepStart).Round(100*time.Millisecond))
	checkDataPath(ctx, t, w, cs, wc, cfg, start)
	checkMetrics(ctx, t, cfg, kubeconfig, bin, cs, start)

	// Scale the Windows workers 2 -> 3 -> 1, then roll them to another
	// Kubernetes version, all through the MachineDeployment.
	md := &clusterv1.MachineDeployment{}
	mdKey := client.ObjectKey{Namespace: "default", Name: "e2e-md-win"}
	// Cluster API's controllers write the MachineDeployment too: a user's
	// change is retried on conflict, as kubectl edit would be.
	update := func(change func(*clusterv1.MachineDeployment)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := w.Client.Get(ctx, mdKey, md); err != nil {
				return err
			}
			change(md)
			return w.Client.Update(ctx, md)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitWindows := func(n int, version string) {
		t.Helper()
		poll.Until(t, 3*time.Minute, func() string {
			wins, err := windowsNodes(ctx, cs)
			if err != nil {
				return err.Error()
			}
			ms := &clusterv1.MachineList{}
			if err := w.Client.List(ctx, ms, client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "e2e-md-win"}); err != nil {
				return err.Error()
			}
			ok := len(wins) == n && len(ms.Items) == n
			for _, v := range wins {
				ok = ok && v == version
			}
			if !ok {
				return fmt.Sprintf("Windows nodes %v, %d machines; want %d at %s", wins, len(ms.Items), n, version)
			}
			return ""
		})
		t.Logf("%6.1fs Windows workers: %d at %s", time.Since(start).Seconds(), n, version)
	}
	update(func(md *clusterv1.MachineDeployment) { md.Spec.Replicas = ptr.To[int32](3) })
	waitWindows(3, "v1.36.3")
	update(func(md *clusterv1.MachineDeployment) { md.Spec.Replicas = ptr.To[int32](1) })
	waitWindows(1, "v1.36.3")
	before, _ := windowsNodes(ctx, cs)
	update(func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = "v1.36.2" })
	waitWindows(1, "v1.36.2")
	after, _ := windowsNodes(ctx, cs)
	for n := range after {
		if _, same := before[n]; same {
			t.Errorf("node %s was not replaced by the rollout", n)
		}
	}
	checkPoolAndReplacement(ctx, t, w, o, cs, start)

	// Down: Cluster API deletes everything; then nothing runs and the
	// state directory is free.
	deleting := time.Now()
	if err := w.DeleteCluster(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%6.1fs cluster deleted in %s", time.Since(start).Seconds(), time.Since(deleting).Round(time.Second))
	if n := w.Runtime().Nodes(); len(n) != 0 {
		t.Errorf("machines still running after the cluster was deleted: %+v", n)
	}
	if left := w.Emulator().ResourceIDs(); len(left) != 0 {
		t.Errorf("Azure resources left in the emulator: %v", left)
	}
	w.Stop()
	stopped = true
	if _, err := os.Stat(filepath.Join(state, "pid")); !os.IsNotExist(err) {
		t.Errorf("pid file left behind: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(state, "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the state directory is still locked after stop: %v", err)
	}
	t.Logf("up, workloads, scaling, rollout and down took %s", time.Since(start).Round(time.Second))
}
