package upgrade_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/vmimages"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks"
)

var (
	env     *testenv.Env
	catalog *vmimages.Lister
)

// TestMain runs the real API server with winkube's and Cluster API's CRDs
// and winkube's webhooks (the management cluster, and the workload
// cluster's nodes and budgets), and the ARM emulator, whose image catalog
// the plan looks the reference images up in.
func TestMain(m *testing.M) {
	log.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	const token = "upgrade-test"
	emu, err := arm.New(arm.Options{Token: token})
	if err == nil {
		err = emu.Start("127.0.0.1:0")
	}
	if err == nil {
		catalog, err = vmimages.New("00000000-0000-0000-0000-000000000001", endpoint.Config{ResourceManagerEndpoint: emu.URL(), CACertPEM: emu.CACertPEM(), Credential: endpoint.StaticToken(token)})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	capi := func(p string) string { return filepath.Join(root, "config", "capi", p) }
	opts := testenv.Options{
		Scheme:                scheme.New(),
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd"), capi("core-v1beta2"), capi("controlplane-kubeadm-v1beta2"), capi("bootstrap-kubeadm-v1beta2")},
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}},
	}
	code := testenv.Main(m, opts, func(e *testenv.Env) {
		env = e
		if err := e.ServeWebhooks(webhooks.SetupWithManager); err != nil {
			fmt.Fprintln(os.Stderr, "webhooks:", err)
			os.Exit(1)
		}
	})
	_ = emu.Close()
	os.Exit(code)
}
