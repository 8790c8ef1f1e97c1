//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/localworld/bringup"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// checkByoMachine is 'winkube node join' end to end on a machine no
// Cluster API object owns: 'winkube machine create' makes a Windows
// Server 2022 VM in the cluster's node subnet through Azure's API; joins
// broken on purpose are named first (checkBrokenJoins); node
// join runs its script over SSH, which the machine's shell runs step by
// step: the image has no Containers feature, so the first run installs it
// and stops for a restart; after the VM restarts (through Azure) the
// second run installs containerd, kubelet and kubeadm and joins through
// kubeadm's discovery and TLS bootstrap, and the post-join check sees the
// node Ready with kube-proxy and the CNI running. A pod placed on the
// node by nodeSelector serves seed 002's way, behind a Service that a
// Linux busybox pod reaches with wget, by the ClusterIP and by the pod's
// IP (wgetFromLinuxPod); a
// restart through Azure brings the node back Ready by its services alone;
// then node leave and machine delete.
func checkByoMachine(ctx context.Context, t *testing.T, w *localworld.World, stateDir string, start time.Time) {
	t.Helper()
	const name = "byo-win-2"
	out, err := runWinkube(ctx, "machine", "create", name, "--state-dir", stateDir, "--cluster", "ha", "--windows", "2022")
	if err != nil {
		t.Fatalf("machine create: %v\n%s", err, out)
	}
	var pip string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == name {
			pip = f[1]
		}
	}
	if pip == "" {
		t.Fatalf("machine create printed no public IP:\n%s", out)
	}
	t.Logf("%6.1fs machine create: %s at %s", time.Since(start).Seconds(), name, pip)

	checkBrokenJoins(ctx, t, w, stateDir, name, pip, start)
	join := []string{"node", "join", name, "--state-dir", stateDir, "--ssh", pip, "--windows-version", "2022", "--wait", "5m"}
	out, err = runWinkube(ctx, join...)
	if err == nil || !strings.Contains(err.Error(), "in step containers-feature") || !strings.Contains(out, "restart the machine") {
		t.Fatalf("first join on an image without the Containers feature: %v, want it to stop in containers-feature for a restart\n%s", err, out)
	}
	ac := &infrav1.AzureCluster{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ha"}, ac); err != nil {
		t.Fatal(err)
	}
	acfg, err := w.AsServicePrincipal()
	if err != nil {
		t.Fatal(err)
	}
	vms, err := endpoint.NewClient(acfg, localworld.Subscription, armcompute.NewVirtualMachinesClient)
	if err != nil {
		t.Fatal(err)
	}
	p, err := vms.BeginRestart(ctx, ac.Spec.ResourceGroup, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("%6.1fs restarted %s for its Containers feature", time.Since(start).Seconds(), name)
	out, err = runWinkube(ctx, join...)
	if err != nil {
		t.Fatalf("join after the restart: %v\n%s", err, out)
	}
	for _, want := range []string{"winkube-step: containerd", "winkube-step: kubeadm-join", "This node has joined the cluster", "is Ready, with kube-proxy and the CNI running"} {
		if !strings.Contains(out, want) {
			t.Errorf("join output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("%6.1fs node join: %s is a Ready node", time.Since(start).Seconds(), name)

	cfg, _, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wins, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/os=windows"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range wins.Items {
		if n.Name != name && n.Status.NodeInfo.ContainerRuntimeVersion != node.Status.NodeInfo.ContainerRuntimeVersion {
			t.Errorf("the joined node runs %s, the cluster's Windows node %s runs %s", node.Status.NodeInfo.ContainerRuntimeVersion, n.Name, n.Status.NodeInfo.ContainerRuntimeVersion)
		}
	}

	// Seed 002's service: a Windows pod placed by nodeSelector, behind a
	// Service.
	labels := map[string]string{"app": "byo-web"}
	if _, err := cs.CoreV1().Pods(noAdmission).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "byo-web", Labels: labels}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelOSStable: "windows", corev1.LabelHostname: name},
		Containers: []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022",
			Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(noAdmission).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "byo-web"}, Spec: corev1.ServiceSpec{
		Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 3*time.Minute, func() string {
		p, err := cs.CoreV1().Pods(noAdmission).Get(ctx, "byo-web", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Spec.NodeName != name || p.Status.Phase != corev1.PodRunning {
			return fmt.Sprintf("byo-web on %q: %s %+v", p.Spec.NodeName, p.Status.Phase, p.Status.ContainerStatuses)
		}
		return ""
	})
	wgetFromLinuxPod(ctx, t, cfg, cs, name, svc.Spec.ClusterIP)
	t.Logf("%6.1fs a pod on %s serves behind a Service a Linux pod reaches", time.Since(start).Seconds(), name)

	// A restart through Azure: the containerd and kubelet services the
	// script registered start again, and the node is Ready with a new
	// boot ID, without another join.
	bootID := node.Status.NodeInfo.BootID
	if n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		bootID = n.Status.NodeInfo.BootID
	}
	p, err = vms.BeginRestart(ctx, ac.Spec.ResourceGroup, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	defer func() {
		if t.Failed() {
			dumpHandNode(t, cs, vms, ac.Spec.ResourceGroup, stateDir, name, restarted)
		}
	}()
	poll.Until(t, 3*time.Minute, func() string {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		if n.Status.NodeInfo.BootID == bootID || !ready {
			return fmt.Sprintf("node %s after the restart: boot ID %q (before %q), Ready %v", name, n.Status.NodeInfo.BootID, bootID, ready)
		}
		return ""
	})
	t.Logf("%6.1fs restarted %s: its services started again, the node is Ready without a rejoin", time.Since(start).Seconds(), name)

	out, err = runWinkube(ctx, "node", "leave", name, "--state-dir", stateDir, "--ssh", pip)
	if err != nil {
		t.Fatalf("node leave: %v\n%s", err, out)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node %s after leave: %v", name, err)
	}
	if _, err := cs.CoreV1().Pods(noAdmission).Get(ctx, "byo-web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod byo-web after leave (drained): %v", err)
	}
	_ = cs.CoreV1().Services(noAdmission).Delete(ctx, "byo-web", metav1.DeleteOptions{})
	if out, err := runWinkube(ctx, "machine", "delete", name, "--state-dir", stateDir, "--cluster", "ha"); err != nil {
		t.Fatalf("machine delete: %v\n%s", err, out)
	}
	for _, n := range w.Runtime().Nodes() {
		if n.Machine == name {
			t.Errorf("machine %s still runs after machine delete", name)
		}
	}
	t.Logf("%6.1fs node leave and machine delete removed %s", time.Since(start).Seconds(), name)
}

// checkBrokenJoins breaks node join on purpose on the fresh machine, each
// way a user does, and checks that the preflight (winkube's, or the
// script's own on the machine) names the cause with its fix, before the
// machine is changed: a 16-character host name, an API server port the
// machine cannot reach, and a token that expired before the script ran
// (--token-ttl 1ms stands for a printed script run late).
func checkBrokenJoins(ctx context.Context, t *testing.T, w *localworld.World, stateDir, name, pip string, start time.Time) {
	t.Helper()
	base := []string{"--state-dir", stateDir, "--ssh", pip, "--windows-version", "2022", "--wait", "0"}
	out, err := runWinkube(ctx, append([]string{"node", "join", "byo-windows-0001"}, base...)...)
	if err == nil || !strings.Contains(err.Error(), `host name "byo-windows-0001" has 16 characters`) || !strings.Contains(err.Error(), "Rename-Computer") {
		t.Errorf("a 16-character host name: %v, want the preflight to name it with Rename-Computer\n%s", err, out)
	}
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	closed := net.JoinHostPort(u.Hostname(), "1")
	out, err = runWinkube(ctx, append([]string{"node", "join", name, "--api-server", closed}, base...)...)
	if err == nil || !strings.Contains(err.Error(), "in step preflight: winkube: FAILED: the API server "+closed+" does not answer on TCP 1 from this machine") ||
		!strings.Contains(err.Error(), "fix: open TCP 1 from this machine to "+u.Hostname()) {
		t.Errorf("an API server port the machine cannot reach: %v, want the script's preflight to name it\n%s", err, out)
	}
	out, err = runWinkube(ctx, append([]string{"node", "join", name, "--token-ttl", "1ms"}, base...)...)
	if err == nil || !strings.Contains(err.Error(), "in step preflight: winkube: FAILED: the bootstrap token ") || !strings.Contains(err.Error(), "run winkube node join again for a script with a new token") {
		t.Errorf("an expired token: %v, want the script's preflight to name it\n%s", err, out)
	}
	t.Logf("%6.1fs broken joins named: 16-character host name, unreachable API port, expired token", time.Since(start).Seconds())
}

// wgetFromLinuxPod runs the e2e busybox image on a control-plane node
// (this world has no Linux worker, so the pod tolerates the
// control-plane taint) and fetches the hand-joined node's pod with
// busybox's wget from the pod's network: through the Service's ClusterIP
// (the node's kube-proxy rules) and at the pod's IP (the CNI's routes to
// the Windows node); a port the Service does not have is refused with
// busybox's words.
func wgetFromLinuxPod(ctx context.Context, t *testing.T, cfg *rest.Config, cs kubernetes.Interface, node, clusterIP string) {
	t.Helper()
	const client = "byo-client"
	if _, err := cs.CoreV1().Pods(noAdmission).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: client}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelOSStable: "linux"},
		Tolerations:  []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{Name: "bb", Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
			Command: []string{"sleep", "3600"}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods(noAdmission).Delete(ctx, client, metav1.DeleteOptions{}) }()
	poll.Until(t, 3*time.Minute, func() string {
		p, err := cs.CoreV1().Pods(noAdmission).Get(ctx, client, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Sprintf("%s on %q: %s %+v", client, p.Spec.NodeName, p.Status.Phase, p.Status.ContainerStatuses)
		}
		return ""
	})
	web, err := cs.CoreV1().Pods(noAdmission).Get(ctx, "byo-web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{clusterIP, web.Status.PodIP} {
		poll.Until(t, 2*time.Minute, func() string {
			out, errs, err := testenv.Exec(ctx, cfg, cs, noAdmission, client, "bb", []string{"wget", "-qO-", "-T", "5", "http://" + target + "/"}, "")
			if err != nil || !strings.Contains(out, noAdmission+"/byo-web") {
				return fmt.Sprintf("wget from Linux pod %s to %s (byo-web on %s): %v %s %s", client, target, node, err, out, errs)
			}
			return ""
		})
	}
	_, errs, err := testenv.Exec(ctx, cfg, cs, noAdmission, client, "bb", []string{"wget", "-qO-", "-T", "5", "http://" + clusterIP + ":81/"}, "")
	if err == nil || !strings.Contains(errs, "wget: can't connect to remote host ("+clusterIP+"): Connection refused") {
		t.Errorf("wget to a port Service byo-web does not have: %v %q, want busybox's connection refused", err, errs)
	}
}

// dumpHandNode logs what says why a hand-joined node did not come back
// after a restart: who renews its lease, its conditions, the VM's instance
// view and the tail of the machine's boot log (the machine runtime's
// events) and kubelet log (the world's state directory goes with the test).
func dumpHandNode(t *testing.T, cs kubernetes.Interface, vms *armcompute.VirtualMachinesClient, rg, stateDir, name string, restarted time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Logf("restarted at %s", restarted.Format(time.RFC3339Nano))
	if l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Logf("lease %s: holder %v renewed %v", name, ptr.Deref(l.Spec.HolderIdentity, "<nil>"), l.Spec.RenewTime)
	} else {
		t.Logf("lease %s: %v", name, err)
	}
	if n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		for _, c := range n.Status.Conditions {
			t.Logf("node %s %s=%s heartbeat %s transition %s: %s", name, c.Type, c.Status, c.LastHeartbeatTime.Format(time.RFC3339), c.LastTransitionTime.Format(time.RFC3339), c.Message)
		}
	}
	if iv, err := vms.InstanceView(ctx, rg, name, nil); err == nil {
		for _, s := range iv.Statuses {
			t.Logf("instance view: %s %s", ptr.Deref(s.Code, ""), ptr.Deref(s.Message, ""))
		}
	}
	for _, ml := range bringup.MachineLogs(stateDir) {
		if !strings.HasSuffix(ml.Machine, "-"+name) {
			continue
		}
		for _, p := range []string{ml.Events, ml.Kubelet} {
			b, err := os.ReadFile(p)
			if p == "" || err != nil {
				continue
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("%s (last %d of %d lines):\n%s", p, min(40, len(lines)), len(lines), strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
}
