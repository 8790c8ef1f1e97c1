package webhooks_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

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

// webhookCache is the cache of the manager serving the webhooks.
var webhookCache client.Reader

func startWebhooks(e *testenv.Env) error {
	return e.ServeWebhooks(func(m ctrl.Manager) error {
		webhookCache = m.GetCache()
		return webhooks.SetupWithManager(m)
	})
}
