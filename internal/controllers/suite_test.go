package controllers_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks"
)

var (
	env     *testenv.Env
	emu     *arm.Server
	runtime = &arm.RecordingRuntime{}
	armCfg  endpoint.Config
)

const token = "controllers-test"

// TestMain runs the real API server with winkube's and Cluster API's CRDs
// and winkube's webhooks, and the ARM emulator. Each test starts managers
// running the controllers against both.
func TestMain(m *testing.M) {
	// The parallel tests (scope_test.go) mostly wait: Go's default of one
	// at a time per CPU would leave a 2-core machine idle through their
	// waits. An explicit -parallel still decides.
	testenv.WaitingTests(parallelTests)
	// Controller logs only with WINKUBE_TEST_LOGS=1: managers stopped by the
	// crash tests log their interrupted work, which is expected.
	logs := io.Discard
	if os.Getenv("WINKUBE_TEST_LOGS") != "" {
		logs = os.Stderr
	}
	log.SetLogger(zap.New(zap.WriteTo(logs)))
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	emu, err = arm.New(arm.Options{Token: token, PollInterval: 10 * time.Millisecond, Runtime: runtime, Seed: 7})
	if err == nil {
		err = emu.Start("127.0.0.1:0")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	armCfg = endpoint.Config{
		ResourceManagerEndpoint: emu.URL(), CACertPEM: emu.CACertPEM(), Credential: endpoint.StaticToken(token),
		Retry: &policy.RetryOptions{MaxRetries: 5, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 2 * time.Second},
	}
	opts := testenv.Options{
		Scheme: scheme.New(),
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd"),
			filepath.Join(root, "config", "capi", "core-v1beta2"),
			filepath.Join(root, "config", "capi", "controlplane-kubeadm-v1beta2"),
			filepath.Join(root, "config", "capi", "addons-v1beta2"),
		},
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}},
	}
	code := testenv.Main(m, opts, func(e *testenv.Env) {
		env = e
		if err := startWebhooks(e); err != nil {
			fmt.Fprintln(os.Stderr, "webhooks:", err)
			os.Exit(1)
		}
	})
	_ = emu.Close()
	os.Exit(code)
}

func startWebhooks(e *testenv.Env) error {
	return e.ServeWebhooks(webhooks.SetupWithManager)
}

// startControllers runs winkube's controllers in a manager of their own until
// the returned stop is called; stop waits for the manager to end.
func startControllers(t testing.TB, cfg endpoint.Config) (stop func()) {
	t.Helper()
	return startControllersWith(t, cfg, nil)
}

// startControllersWith is startControllers with a change to the
// controllers' options. Most tests' clusters have no identityRef and act as
// the emulator's static token, the manager's own credential: it is enabled
// for every namespace, as an operator would with
// --manager-credential-namespaces='*'. The tests of that refusal set
// ManagerCredentialNamespaces to nil.
func startControllersWith(t testing.TB, cfg endpoint.Config, change func(*controllers.Options)) (stop func()) {
	t.Helper()
	return startManagerWith(t, managerOptions(t), cfg, change)
}

// startManagerWith is startControllersWith on a manager of options mo.
func startManagerWith(t testing.TB, mo ctrl.Options, cfg endpoint.Config, change func(*controllers.Options)) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, mo)
	if err != nil {
		t.Fatal(err)
	}
	o := controllers.Options{Cloud: cloud.New(cfg), Concurrency: 4, Requeue: 50 * time.Millisecond, SkipNameValidation: true, TenantID: testTenant,
		ManagerCredentialNamespaces: []string{controllers.AllNamespaces}}
	if change != nil {
		change(&o)
	}
	if err := controllers.Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	return runManager(t, mgr)
}

// runManager starts mgr and waits until it is working (testenv.StartManager:
// stopped earlier, it would never end); stop ends it and waits until it has.
func runManager(t testing.TB, mgr ctrl.Manager) (stop func()) {
	t.Helper()
	stopMgr, err := testenv.StartManager(mgr)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := stopMgr(); err != nil {
			t.Errorf("manager: %v", err)
		}
	}
}
