//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// TestThreeControlPlanes: the kubeadm control-plane provider scales the
// control plane to three machines; the second and third join the first's
// etcd as members, and the provider, reaching each member through the API
// server's port-forward, reports etcd healthy. Its Windows worker runs
// Windows Server 2019, which the same world then leaves for 2022
// (checkMoveOff2019), where seed 003's examples, the Windows limits
// (checkWindowsLimits) and a claim through the Azure Disk CSI driver
// (checkDiskVolume) are tried; then a Windows worker of each rehearsed bootstrap
// failure is diagnosed (checkRehearsedFailures): one booted world for all,
// as CI's time is short.
func TestThreeControlPlanes(t *testing.T) {
	testenv.SkipIfShort(t, "a booted local world")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	switch os.Getenv("WINKUBE_TEST_LOGS") {
	case "":
	case "debug": // with the machines' events and the kubelets' retries
		log.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.DebugLevel)))
	default:
		log.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	start := time.Now()
	o := localworld.Options{
		Name: "ha", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3", ControlPlaneNodes: 3, LinuxNodes: 0, WindowsNodes: 1,
		WindowsVersion: infrav1.WindowsServer2019, StateDir: t.TempDir(), Bin: bin, Log: log.Log, AzureDiskCSI: true,
		// The rehearsed bootstraps give up after rehearsalTimeout: their
		// log is read once they have.
		BootstrapTimeout: rehearsalDeadline,
		Progress:         func(s string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), s) },
	}
	limit := 16 * time.Minute // 12 before node join's own machine (checkByoMachine), 15 before its broken joins and restart
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
	dump := func() {
		ms := &clusterv1.MachineList{}
		_ = w.Client.List(context.Background(), ms)
		for _, m := range ms.Items {
			t.Logf("machine %s providerID=%s nodeRef=%v phase=%s", m.Name, m.Spec.ProviderID, m.Status.NodeRef, m.Status.Phase)
		}
		if cfg, _, err := w.Workload(context.Background()); err == nil {
			cfg.Timeout = 5 * time.Second
			nodes, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Logf("nodes: %v", err)
				return
			}
			for _, n := range nodes.Items {
				t.Logf("node %s providerID=%s taints=%v", n.Name, n.Spec.ProviderID, n.Spec.Taints)
			}
		}
	}
	if err := w.CreateCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx); err != nil {
		dump()
		t.Fatal(err)
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	poll.Until(t, 3*time.Minute, func() string {
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ha-control-plane"}, kcp); err != nil {
			return err.Error()
		}
		if conditions.IsTrue(kcp, controlplanev1.KubeadmControlPlaneEtcdClusterHealthyCondition) && ptr.Deref(kcp.Status.ReadyReplicas, 0) == 3 {
			return ""
		}
		return fmt.Sprintf("KubeadmControlPlane: %d ready, conditions %+v", ptr.Deref(kcp.Status.ReadyReplicas, 0), kcp.Status.Conditions)
	})
	t.Logf("%6.1fs three control planes, etcd healthy as Cluster API sees it", time.Since(start).Seconds())
	schedulerCrashSeenByKCP(t, ctx, w, "ha-control-plane")
	t.Logf("%6.1fs a crashed kube-scheduler seen unhealthy, then healthy, by the provider", time.Since(start).Seconds())
	checkMoveOff2019(ctx, t, w, o, start)
	checkWindowsLimits(ctx, t, w, o, start)
	checkDiskVolume(ctx, t, w, start)
	checkNodeJoin(ctx, t, w)
	t.Logf("%6.1fs node join's token, CA hash and preflight work against the world's cluster; node leave removed the node", time.Since(start).Seconds())
	checkByoMachine(ctx, t, w, o.StateDir, start)
	checkRehearsedFailures(ctx, t, w, o, start)
	if err := w.DeleteCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if n := w.Runtime().Nodes(); len(n) != 0 {
		t.Errorf("machines still running: %+v", n)
	}
}
