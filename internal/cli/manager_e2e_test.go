package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// managerEnvOptions are an API server's with winkube's and Cluster API's
// core CRDs and winkube's webhook configurations, for a test of `winkube
// manager`.
func managerEnvOptions() (testenv.Options, error) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return testenv.Options{}, err
	}
	return testenv.Options{
		Scheme:                scheme.New(),
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd"), filepath.Join(root, "config", "capi", "core-v1beta2")},
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}},
	}, nil
}

// managerCommandAPI is the API server of TestManagerCommandProvisionsAgainstTheEmulator
// alone (managerEnvOptions): the manager it runs installs and serves
// winkube's webhooks itself, where managementAPI's are served by the
// test process. TestMain starts it beside the package's other control
// planes, so that the test does not wait out a start of its own.
var managerCommandAPI = &testenv.Shared{}

// TestManagerCommandProvisionsAgainstTheEmulator runs `winkube manager` as a
// user would, against a real API server (with its webhooks served by the
// command) and the emulator, and checks that a cluster is provisioned and
// the ARM calls show in its Prometheus metrics.
func TestManagerCommandProvisionsAgainstTheEmulator(t *testing.T) {
	env := managerCommandAPI.Env(t)
	dir, err := entra.New(entra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	emu, err := arm.New(arm.Options{Directory: dir, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	cert, err := emu.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	login, err := entra.Serve(dir, "127.0.0.1:0", cert)
	if err != nil {
		t.Fatal(err)
	}
	defer login.Close()
	// The manager's own credential (the cluster has no identityRef, in a
	// namespace the command enables it for): a service principal from the
	// environment, as DefaultAzureCredential reads it.
	sp, secret, err := dir.CreateServicePrincipal("00000000-0000-4000-8000-0000000000e2", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.AssignRole(sp.ObjectID, "Contributor", "/subscriptions/00000000-0000-0000-0000-0000000000e2"); err != nil {
		t.Fatal(err)
	}
	// The flavors' machines get system-assigned identities, whose roles
	// the manager assigns.
	if err := dir.AssignRole(sp.ObjectID, "User Access Administrator", "/subscriptions/00000000-0000-0000-0000-0000000000e2"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AZURE_TENANT_ID", sp.TenantID)
	t.Setenv("AZURE_CLIENT_ID", sp.ClientID)
	t.Setenv("AZURE_CLIENT_SECRET", secret)
	tmp := t.TempDir()
	kubeconfig, caFile := filepath.Join(tmp, "kubeconfig"), filepath.Join(tmp, "ca.pem")
	if err := os.WriteFile(kubeconfig, env.Environment.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, emu.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	wio := env.Environment.WebhookInstallOptions
	metricsPort := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := NewRootCommand()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"manager", "--kubeconfig", kubeconfig, "--arm-endpoint", emu.URL(), "--arm-ca-file", caFile, "--entra-endpoint", login.URL(),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(metricsPort), "--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(freePort(t)),
		"--webhook-port", strconv.Itoa(wio.LocalServingPort), "--webhook-cert-dir", wio.LocalServingCertDir, "--requeue", "100ms",
		"--manager-credential-namespaces", "default"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	c := env.Client
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e", Namespace: "default"},
		Spec:       clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureCluster", Name: "e2e"}},
	}
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	ac := &infrav1.AzureCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e", Namespace: "default", Labels: map[string]string{clusterv1.ClusterNameLabel: "e2e"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: "e2e", UID: cluster.UID}}},
		Spec: infrav1.AzureClusterSpec{SubscriptionID: "00000000-0000-0000-0000-0000000000e2", Location: "westeurope"},
	}
	// The webhooks are the command's: wait until it serves them.
	poll.Until(t, time.Minute, func() string {
		if err := c.Create(ctx, ac); err != nil {
			return "creating the AzureCluster through the command's webhooks: " + err.Error()
		}
		return ""
	})
	if ac.Spec.ResourceGroup != "e2e" {
		t.Fatalf("the command's defaulting webhook did not run: resource group %q", ac.Spec.ResourceGroup)
	}
	poll.Until(t, time.Minute, func() string {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ac), ac); err != nil || !ptr.Deref(ac.Status.Initialization.Provisioned, false) {
			return fmt.Sprintf("AzureCluster not provisioned by winkube manager: %v %+v", err, ac.Status.Conditions)
		}
		return ""
	})
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `winkube_arm_requests_total{code="201",kind="virtualNetworks",method="PUT"}`) {
		t.Fatalf("metrics lack the VNet PUT:\n%s", grepLines(string(body), "winkube_arm"))
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("winkube manager: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("winkube manager did not stop")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
