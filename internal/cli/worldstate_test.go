package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks"
)

// managementAPI is one API server, with winkube's CRDs and Cluster API's
// core, kubeadm bootstrap and kubeadm control-plane ones, for the tests
// that play a management cluster (and, through its <cluster>-kubeconfig
// Secret, the workload cluster): doctor, plan, rehearse, logs and machine.
// One each cost seven API server starts, tens of seconds apiece on a loaded
// 2-core machine. The tests share it as tenants share a management cluster:
// each keeps its Cluster API objects in a namespace of its own
// (testNamespace), and since the commands read a workload cluster whole
// (its Nodes, and pods of every namespace), what a test makes there is
// deleted when it ends (createAndRemove).
//
// It also serves the tests whose `winkube manager` processes run without
// webhooks (managerProcessEnv), each with its clusters in namespaces of its
// own: winkube's webhooks are served for it from this process, for every
// test, as a management cluster has them. Use it through managementEnv.
var managementAPI = &testenv.Shared{}

var managementWebhooks struct {
	once sync.Once
	err  error
}

// managementEnv is managementAPI with winkube's webhooks served.
func managementEnv(t *testing.T) *testenv.Env {
	t.Helper()
	env := managementAPI.Env(t)
	managementWebhooks.once.Do(func() {
		managementWebhooks.err = env.ServeWebhooks(func(m ctrl.Manager) error { return webhooks.SetupWithManager(m) })
	})
	if managementWebhooks.err != nil {
		t.Fatal(managementWebhooks.err)
	}
	return env
}

// managementAPIOptions are managementAPI's, set by TestMain.
func managementAPIOptions() (testenv.Options, error) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return testenv.Options{}, err
	}
	var dirs []string
	for _, d := range []string{"crd", "capi/core-v1beta2", "capi/bootstrap-kubeadm-v1beta2", "capi/controlplane-kubeadm-v1beta2"} {
		dirs = append(dirs, filepath.Join(root, "config", d))
	}
	return testenv.Options{Scheme: scheme.New(), CRDDirectoryPaths: dirs,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}}}, nil
}

// testNamespace creates a namespace of the test's own in the shared API
// server, named after the test with a suffix the server picks, so that
// -count=N finds none left by an earlier run. A namespace is never deleted:
// envtest runs no namespace controller to empty it, and the server stops
// with the package's tests.
func testNamespace(t *testing.T, env *testenv.Env) string {
	t.Helper()
	prefix := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(strings.TrimPrefix(t.Name(), "Test")))
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(prefix, "-") + "-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// kubeconfigIn is env's kubeconfig with ns as its context's namespace,
// which the commands that take -n default to.
func kubeconfigIn(t *testing.T, env *testenv.Env, ns string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(env.Environment.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Contexts {
		c.Namespace = ns
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// createAndRemove creates objs and deletes them when the test ends, for
// what a test makes where the other tests' commands look too: a workload
// cluster's Nodes and pods.
func createAndRemove(t *testing.T, env *testenv.Env, objs ...client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("%T %s: %v", o, o.GetName(), err)
		}
		t.Cleanup(func() {
			// No kubelet confirms a pod's end here: delete at once.
			if err := env.Client.Delete(ctx, o, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("removing %T %s: %v", o, o.GetName(), err)
			}
		})
	}
}

// fakeWorldState returns the shared API server (managementAPI), a
// namespace of the test's own in it, and a local world's state directory
// whose management kubeconfig reaches it: what the commands that read a
// world (doctor, plan) are given by --state-dir.
func fakeWorldState(t *testing.T) (env *testenv.Env, ns, state string) {
	t.Helper()
	env = managementEnv(t)
	ns = testNamespace(t, env)
	state = t.TempDir()
	if err := os.WriteFile(filepath.Join(state, localworld.ManagementKubeconfig), kubeconfigIn(t, env, ns), 0o600); err != nil {
		t.Fatal(err)
	}
	return env, ns, state
}

// commandRunner runs the root command with args after the given words,
// returning what it wrote to its output.
func commandRunner(ctx context.Context, words ...string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		cmd := NewRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(append(append([]string(nil), words...), args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
}
