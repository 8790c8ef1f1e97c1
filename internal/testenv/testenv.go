// Package testenv starts a real kube-apiserver and etcd, built by hack/tools
// into bin/, through controller-runtime's envtest. Every controller and webhook
// test in winkube stands on it, so that they exercise the real API machinery
// (validation, defaulting, admission, watches) rather than a fake client.
package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Options says what the API server is started with.
type Options struct {
	// Scheme the client uses; client-go's scheme when nil.
	Scheme *runtime.Scheme
	// CRDDirectoryPaths are folders (or files) of CRD manifests to install.
	CRDDirectoryPaths []string
	// CRDs are installed in addition to those found on CRDDirectoryPaths.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// WebhookInstallOptions configures admission webhooks served by the test.
	WebhookInstallOptions envtest.WebhookInstallOptions
	// APIServerFlags are set on kube-apiserver's command line, by name
	// without the dashes.
	APIServerFlags map[string]string
}

// Env is a running control plane and a client for it.
type Env struct {
	Environment *envtest.Environment
	Config      *rest.Config
	Client      client.Client
	Scheme      *runtime.Scheme
	// KubeletClientCA is what a simulated kubelet of the test must verify
	// client certificates with (kubelet.Config.ClientCA): the API server
	// calls kubelets with a certificate of that CA, and the test's admin
	// Config's certificate is in it too.
	KubeletClientCA *x509.CertPool
	pki             string
	// stopWebhooks ends the webhook manager (ServeWebhooks) and waits
	// for it; nil when none runs.
	stopWebhooks func()
	watched      watched
}

// Tools the control plane needs; both come from hack/tools.
var requiredBinaries = []string{"kube-apiserver", "etcd"}

// BinDir is where the binaries built by hack/tools live: $KUBEBUILDER_ASSETS
// when set, otherwise bin/ at the root of the winkube module.
func BinDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// ModuleRoot walks up from the working directory to the folder that holds
// winkube's go.mod, so tests find bin/ and config/ from any package.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isWinkubeModule(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no winkube go.mod above the working directory")
		}
		dir = parent
	}
}

func isWinkubeModule(gomod []byte) bool {
	const want = "module github.com/winkube/winkube\n"
	return len(gomod) >= len(want) && string(gomod[:len(want)]) == want
}

// Start starts etcd and kube-apiserver and installs the CRDs.
func Start(opts Options) (*Env, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	for _, b := range requiredBinaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("testenv: %s is missing from %s: run `make tools` (hack/tools/build.sh) to build it", b, bin)
		}
	}
	scheme := opts.Scheme
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     opts.CRDDirectoryPaths,
		CRDs:                  opts.CRDs,
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: opts.WebhookInstallOptions,
		Scheme:                scheme,
	}
	pki, err := os.MkdirTemp("", "testenv-pki-")
	if err != nil {
		return nil, err
	}
	caPEM, certFile, keyFile, err := kubeletClient(pki)
	if err != nil {
		_ = os.RemoveAll(pki)
		return nil, fmt.Errorf("testenv: the API server's kubelet client certificate: %w", err)
	}
	// envtest looks every 100 ms for its CRDs in discovery and its webhook
	// configurations; both are there within milliseconds of the request
	// that made them, so a look every 10 ms saves most of a wasted tick.
	if env.CRDInstallOptions.PollInterval == 0 {
		env.CRDInstallOptions.PollInterval = 10 * time.Millisecond
	}
	if env.WebhookInstallOptions.PollInterval == 0 {
		env.WebhookInstallOptions.PollInterval = 10 * time.Millisecond
	}
	// envtest gives each process 20 s to answer its health check. On a
	// 2-core machine running other test packages beside this one (CI's
	// make test, a package's control planes started together by Prestart)
	// kube-apiserver has taken longer, and the start failed where a wait
	// would have done. The environment variable envtest reads still wins.
	if _, set := os.LookupEnv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT"); !set {
		env.ControlPlaneStartTimeout = 2 * time.Minute
	}
	api := env.ControlPlane.GetAPIServer().Configure()
	api.Set("kubelet-client-certificate", certFile)
	api.Set("kubelet-client-key", keyFile)
	for k, v := range opts.APIServerFlags {
		api.Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		_ = os.RemoveAll(pki)
		return nil, fmt.Errorf("testenv: starting kube-apiserver and etcd from %s: %w", bin, err)
	}
	e := &Env{Environment: env, Config: cfg, Scheme: scheme, pki: pki}
	if err := warmWatchCaches(context.Background(), cfg, env.CRDs); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if e.KubeletClientCA, err = kubeletClientCA(caPEM, env.ControlPlane.APIServer.CertDir); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("testenv: client: %w", err)
	}
	return e, nil
}

// Stop stops the API server and etcd and removes their data.
func (e *Env) Stop() error {
	if e.pki != "" {
		defer os.RemoveAll(e.pki)
	}
	// Until's informers end before the API server they watch, so that
	// none is left retrying a server that is gone.
	e.stopWatched()
	// Killed first, the API server takes its connections to the webhook
	// server with it. Stopped while the API server still held them, the
	// webhook server's graceful shutdown waited about a second for them to
	// go idle, at the end of every package that serves webhooks.
	killed := killAPIServer(e.Environment.ControlPlane.GetAPIServer().CertDir)
	// Where it could not be killed, the webhook manager's informers hold
	// watches open that kube-apiserver waits for on SIGTERM, and envtest
	// waits out its whole stop timeout (20 s) before it kills it: ended
	// first, the API server stops at once.
	if e.stopWebhooks != nil {
		e.stopWebhooks()
	}
	err := e.Environment.Stop()
	if killed && onlyFailedToSignal(err) {
		// The reaper had not yet marked the killed process exited, so
		// envtest signalled a process that was gone; etcd was stopped all
		// the same.
		return nil
	}
	return err
}

// onlyFailedToSignal says whether err is envtest's report that it could
// not signal kube-apiserver, and nothing else.
func onlyFailedToSignal(err error) bool {
	if err == nil {
		return false
	}
	errs := []error{err}
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		errs = agg.Errors()
	}
	for _, e := range errs {
		if !strings.Contains(e.Error(), "unable to signal for process") || !strings.Contains(e.Error(), "kube-apiserver") {
			return false
		}
	}
	return true
}

// Main is for a package's TestMain: it starts one control plane for all the
// package's tests, hands it to setup, runs the tests and stops it. A control
// plane that cannot start fails the package; it never skips it.
func Main(m *testing.M, opts Options, setup func(*Env)) int {
	env, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stop:", err)
		}
	}()
	if setup != nil {
		setup(env)
	}
	return m.Run()
}

// ServeWebhooks starts a manager that serves the webhooks register adds, on
// the address envtest configured the API server to call, and waits until it
// answers. The manager runs until Stop.
func (e *Env) ServeWebhooks(register func(ctrl.Manager) error) error {
	wio := &e.Environment.WebhookInstallOptions
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:  e.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	})
	if err != nil {
		return err
	}
	if err := register(mgr); err != nil {
		return err
	}
	stop, err := StartManager(mgr)
	if err != nil {
		return err
	}
	e.stopWebhooks = func() {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: webhook manager:", err)
		}
	}
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	var dialErr error
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe of our own test server
		if err != nil {
			dialErr = err
			return false, nil
		}
		return true, conn.Close()
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("testenv: webhook server on %s did not come up: %w", addr, dialErr)
	}
	return err
}

// Shared is one control plane for the tests of a package that do not
// need one of their own: the first test that asks starts it, the rest
// reuse it, and the package's TestMain stops it after m.Run. Starting
// kube-apiserver and etcd costs seconds on a loaded machine, more than
// most of the tests that use them; tests that share one keep apart by
// names (their own Nodes, namespaces or objects), as on any cluster.
// A package whose tests need none (`-run` of unit tests) starts none.
type Shared struct {
	// Options are what the control plane starts with.
	Options Options

	once sync.Once
	env  *Env
	err  error
}

// Env starts the control plane on first use and returns it; a control
// plane that cannot start fails the test, as Start's error would.
func (s *Shared) Env(tb testing.TB) *Env {
	tb.Helper()
	s.once.Do(s.start)
	if s.err != nil {
		tb.Fatal(s.err)
	}
	return s.env
}

func (s *Shared) start() { s.env, s.err = Start(s.Options) }

// Prestart starts the control planes in the background when the package's
// whole suite runs, so that their starts (seconds of mostly waiting for
// kube-apiserver's post-start hooks) overlap each other and the tests that
// need none; the first test that needs one waits for it. Under -run or
// -list it starts none, and the first test that asks starts its own as
// before. It is for TestMain, and parses the flags.
func Prestart(shared ...*Shared) {
	if !flag.Parsed() {
		flag.Parse()
	}
	for _, name := range []string{"test.run", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return
		}
	}
	for _, s := range shared {
		go s.once.Do(s.start)
	}
}

// StopShared stops the control planes together; for TestMain, after m.Run.
func StopShared(shared ...*Shared) {
	var wg sync.WaitGroup
	for _, s := range shared {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop()
		}()
	}
	wg.Wait()
}

// Stop stops the control plane if a test (or Prestart) started it; for
// TestMain, after m.Run. A start still under way is waited for first.
func (s *Shared) Stop() {
	s.once.Do(func() {})
	if s.env != nil {
		if err := s.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stop:", err)
		}
	}
}
