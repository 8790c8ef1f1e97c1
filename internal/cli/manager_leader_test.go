package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/incluster"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// syncBuffer collects a process's output while the test reads it.
type syncBuffer = testenv.SyncBuffer

// managerProcess is `winkube manager` running as its own process, against
// an emulator of its own, so the test sees which manager did the work.
type managerProcess struct {
	cmd    *exec.Cmd
	emu    *arm.Server
	out    *syncBuffer
	health int
	done   chan error
}

func startManagerProcess(t *testing.T, kubeconfig string, extra ...string) *managerProcess {
	t.Helper()
	emu, login, credEnv := emulatorWithEntra(t, nil)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, emu.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &managerProcess{emu: emu, out: &syncBuffer{}, health: freePort(t), done: make(chan error, 1)}
	args := append([]string{"manager", "--kubeconfig", kubeconfig, "--arm-endpoint", emu.URL(), "--arm-ca-file", caFile, "--entra-endpoint", login.URL(),
		"--metrics-bind-address", "0", "--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(p.health), "--no-webhooks", "--requeue", "100ms",
		// Its clusters act as the manager's own credential, in every namespace.
		"--manager-credential-namespaces", "*"}, extra...)
	bin, env := winkubeProcess(t)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = env
	for k, v := range credEnv {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	poll.Until(t, 2*time.Minute, func() string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.health))
		if err != nil {
			return "manager not ready: " + err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("manager readyz: %d", resp.StatusCode)
		}
		return ""
	})
	// The liveness endpoint the Deployment probes.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", p.health))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("manager healthz: %d", resp.StatusCode)
	}
	return p
}

// managerProcessEnv is the package's management API server (managementEnv)
// and a kubeconfig file for it, for the tests whose managers run as
// processes of their own without webhooks: the webhooks are served from
// this process, as another replica's would be.
func managerProcessEnv(t *testing.T) (env *testenv.Env, kubeconfig string) {
	t.Helper()
	env = managementEnv(t)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Environment.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return env, kubeconfig
}

// newAzureCluster creates a Cluster and its AzureCluster, as Cluster API
// would (owner reference, cluster-name label), in its own resource group.
func newAzureCluster(t *testing.T, c client.Client, ns, name, subscription string) *infrav1.AzureCluster {
	t.Helper()
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureCluster", Name: name}},
	}
	if err := c.Create(context.Background(), cluster); err != nil {
		t.Fatal(err)
	}
	ac := &infrav1.AzureCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: name, UID: cluster.UID}}},
		Spec: infrav1.AzureClusterSpec{SubscriptionID: subscription, Location: "westeurope", ResourceGroup: name},
	}
	if err := c.Create(context.Background(), ac); err != nil {
		t.Fatal(err)
	}
	return ac
}

// groups lists the resource groups in which the manager created resources
// in its emulator.
func (p *managerProcess) groups() []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range p.emu.ResourceIDs() {
		parts := strings.Split(id, "/")
		if len(parts) > 4 && strings.EqualFold(parts[3], "resourceGroups") && !seen[parts[4]] {
			seen[parts[4]] = true
			out = append(out, parts[4])
		}
	}
	return out
}

func hasGroup(p *managerProcess, name string) bool {
	for _, g := range p.groups() {
		if strings.EqualFold(g, name) {
			return true
		}
	}
	return false
}

// TestTwoManagersOnlyTheLeaderReconciles runs two `winkube manager`
// processes with --leader-elect against one API server, each talking to an
// emulator of its own: only the Lease holder's emulator sees ARM calls.
// When the leader is stopped with SIGTERM it exits cleanly, hands the Lease
// over, and the other manager reconciles the clusters from then on.
func TestTwoManagersOnlyTheLeaderReconciles(t *testing.T) {
	t.Parallel()
	env, kubeconfig := managerProcessEnv(t)
	ctx := context.Background()
	c := env.Client
	ns := testNamespace(t, env)
	lease := &coordinationv1.Lease{}
	holder := func() string {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: incluster.LeaderElectionID}, lease); err != nil {
			return ""
		}
		return ptr.Deref(lease.Spec.HolderIdentity, "")
	}
	// Lease timings generous enough that a loaded machine does not make the
	// leader miss a renewal (it would then exit, and the follower lead):
	// the hand-over under test is the release on SIGTERM, which is immediate.
	// A candidate tries to acquire every retry period plus up to 1.2 times
	// it again (client-go v0.36.3 tools/leaderelection/leaderelection.go:
	// acquire's wait.JitterUntil with JitterFactor 1.2), so the follower
	// took the released Lease one to two seconds after the leader let it go;
	// at 200ms it takes it at once. The leader renews as often, a few
	// small requests a second; whether it keeps the Lease under load
	// depends on the renew deadline, which stays 15s.
	//
	// Both watch only the test's namespace: the API server is the package's
	// management one, whose other tests' clusters (some with endpoints a
	// test records every connection to) are not these managers' to touch.
	leaderFlags := []string{"--leader-elect", "--leader-election-namespace", "kube-system",
		"--leader-elect-lease-duration", "20s", "--leader-elect-renew-deadline", "15s", "--leader-elect-retry-period", "200ms",
		"--watch-namespace", ns}

	first := startManagerProcess(t, kubeconfig, leaderFlags...)
	var firstHolder string
	poll.Until(t, 2*time.Minute, func() string {
		if firstHolder = holder(); firstHolder == "" {
			return "the first manager holds no Lease kube-system/" + incluster.LeaderElectionID
		}
		return ""
	})
	second := startManagerProcess(t, kubeconfig, leaderFlags...)

	newCluster := func(name string) *infrav1.AzureCluster {
		return newAzureCluster(t, c, ns, name, "00000000-0000-0000-0000-0000000000e3")
	}
	provisioned := func(ac *infrav1.AzureCluster) func() string {
		return func() string {
			if err := c.Get(ctx, client.ObjectKeyFromObject(ac), ac); err != nil || !ptr.Deref(ac.Status.Initialization.Provisioned, false) {
				return fmt.Sprintf("AzureCluster %s not provisioned: %v %+v", ac.Name, err, ac.Status.Conditions)
			}
			return ""
		}
	}

	one := newCluster("leader-one")
	poll.Until(t, 2*time.Minute, provisioned(one))
	if !hasGroup(first, "leader-one") {
		t.Fatalf("the leader's emulator lacks resource group leader-one: %v", first.groups())
	}
	// The follower has been running all along, with its caches and health
	// endpoints, but must not have called ARM once.
	if n := len(second.emu.Counters()); n != 0 || len(second.groups()) != 0 {
		t.Fatalf("the follower reconciled: %d ARM request kinds, groups %v\n%s", n, second.groups(), second.out.String())
	}
	if h := holder(); h != firstHolder {
		t.Fatalf("the Lease changed hands while both ran: %q then %q", firstHolder, h)
	}

	// SIGTERM, as the kubelet stops a Pod: the leader finishes, releases the
	// Lease and exits 0.
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-first.done:
		first.done <- err
		if err != nil {
			t.Fatalf("the leader did not exit cleanly on SIGTERM: %v\n%s", err, first.out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the leader did not stop on SIGTERM\n%s", first.out.String())
	}
	poll.Until(t, 2*time.Minute, func() string {
		if h := holder(); h == "" || h == firstHolder {
			return fmt.Sprintf("the Lease is still %q, not taken over by the second manager", h)
		}
		return ""
	})
	two := newCluster("leader-two")
	poll.Until(t, 2*time.Minute, provisioned(two))
	poll.Until(t, 2*time.Minute, func() string {
		if !hasGroup(second, "leader-one") || !hasGroup(second, "leader-two") {
			return fmt.Sprintf("the new leader has not reconciled both clusters: groups %v", second.groups())
		}
		return ""
	})
	if hasGroup(first, "leader-two") {
		t.Fatalf("the stopped leader reconciled a cluster created after it stopped: %v", first.groups())
	}
}

// TestManagerWatchNamespace: with --watch-namespace the manager reconciles
// only that namespace's clusters. The other namespace's cluster is created
// first, so by the time the watched one is provisioned the manager has had
// every chance to see it.
func TestManagerWatchNamespace(t *testing.T) {
	env, kubeconfig := managerProcessEnv(t)
	ctx := context.Background()
	c := env.Client
	teamA, teamB := testNamespace(t, env), testNamespace(t, env)
	p := startManagerProcess(t, kubeconfig, "--watch-namespace", teamA)
	other := newAzureCluster(t, c, teamB, "unwatched", "00000000-0000-0000-0000-0000000000e4")
	watched := newAzureCluster(t, c, teamA, "watched", "00000000-0000-0000-0000-0000000000e4")
	poll.Until(t, 2*time.Minute, func() string {
		if err := c.Get(ctx, client.ObjectKeyFromObject(watched), watched); err != nil || !ptr.Deref(watched.Status.Initialization.Provisioned, false) {
			return fmt.Sprintf("AzureCluster %s/watched not provisioned: %v %+v", teamA, err, watched.Status.Conditions)
		}
		return ""
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	if len(other.Finalizers) != 0 || len(other.Status.Conditions) != 0 || hasGroup(p, "unwatched") {
		t.Fatalf("the manager reconciled a cluster outside --watch-namespace: finalizers %v conditions %v groups %v", other.Finalizers, other.Status.Conditions, p.groups())
	}
}
