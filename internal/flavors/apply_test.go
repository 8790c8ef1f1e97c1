package flavors_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var crds []string
	for _, d := range []string{"crd", "capi/core-v1beta2", "capi/bootstrap-kubeadm-v1beta2", "capi/controlplane-kubeadm-v1beta2", "capi/addons-v1beta2"} {
		crds = append(crds, filepath.Join(root, "config", d))
	}
	opts := testenv.Options{
		Scheme: scheme.New(), CRDDirectoryPaths: crds,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}},
	}
	os.Exit(testenv.Main(m, opts, func(e *testenv.Env) {
		env = e
		if err := e.ServeWebhooks(webhooks.SetupWithManager); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}))
}

// TestApplyToAPIServer creates every object of the Windows flavors in a real
// API server with Cluster API's and winkube's CRDs and webhooks: none is
// refused (schema, defaulting or validation).
func TestApplyToAPIServer(t *testing.T) {
	ctx := context.Background()
	for _, flavor := range []string{flavors.Windows, flavors.MachinePoolWindows, flavors.WindowsFlannel} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apply-" + flavor}}
		if err := env.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		o := opts("v1.36.3", "2022")
		o.Namespace = ns.Name
		objs, err := flavors.Generate(flavor, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Errorf("%s: %T %s refused: %v", flavor, obj, obj.GetName(), err)
			}
		}
	}
}
