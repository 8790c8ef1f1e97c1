package webhooks_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks"
)

var env *testenv.Env

// TestMain runs the real kube-apiserver with winkube's and Cluster API's CRDs
// and winkube's webhooks installed, served by a controller-runtime manager
// exactly as `winkube manager` serves them.
func TestMain(m *testing.M) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opts := testenv.Options{
		Scheme: scheme.New(),
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd"),
			filepath.Join(root, "config", "capi", "core-v1beta2"),
		},
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}},
	}
	os.Exit(testenv.Main(m, opts, func(e *testenv.Env) {
		env = e
		if err := startWebhooks(e); err != nil {
			fmt.Fprintln(os.Stderr, "starting webhooks:", err)
			os.Exit(1)
		}
	}))
}

func startWebhooks(e *testenv.Env) error {
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
	if err := webhooks.SetupWithManager(mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
			os.Exit(1)
		}
	}()
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe of our own test server
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook server on %s did not come up: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
