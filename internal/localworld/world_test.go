package localworld_test

import (
	"context"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/testenv"
)

// TestUpAndDown is issue 9's end-to-end run: a mixed cluster of one
// control plane, one Linux and two Windows workers comes up through the
// real Cluster API controllers.
func TestUpAndDown(t *testing.T) {
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("WINKUBE_TEST_LOGS") != "" {
		log.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	start := time.Now()
	o := localworld.Options{
		Name: "e2e", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3", ControlPlaneNodes: 1, LinuxNodes: 1, WindowsNodes: 2,
		WindowsVersion: infrav1.WindowsServer2022, StateDir: t.TempDir(), Bin: bin,
		Progress: func(s string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), s) },
		Log:      log.Log,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w, err := localworld.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.CreateCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("all nodes Ready after %s", time.Since(start).Round(time.Second))
	if err := w.DeleteCluster(ctx); err != nil {
		t.Fatal(err)
	}
}
