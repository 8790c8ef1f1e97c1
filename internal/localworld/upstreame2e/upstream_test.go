//go:build upstreame2e

package upstreame2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/testenv"
)

// TestUpstreamWindowsE2E boots a 1+1+2 world on Windows Server 2022 (as
// TestUpAndDown does) and runs the upstream [sig-windows] specs against its
// workload cluster, but those Skips lists. The report (JUnit, summary and
// Ginkgo's log) goes to $WINKUBE_E2E_REPORT, default bin/e2e-upstream/.
// Each failing spec fails the test with its first line.
//
// Ginkgo runs the specs in parallel ($WINKUBE_E2E_PROCS processes, default
// 6): a spec whose image the world cannot pull waits five minutes
// (framework.PodStart, test/e2e/framework/timeouts.go) before it fails, and
// the processes mostly wait on the API server, not on CPU. [Serial] specs
// still run alone, after the others (Ginkgo's rule).
func TestUpstreamWindowsE2E(t *testing.T) {
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	e2e, ginkgo := filepath.Join(root, "bin", "e2e.test"), filepath.Join(root, "bin", "ginkgo")
	for _, p := range []string{e2e, ginkgo} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: build it with make e2e-upstream", err)
		}
	}
	reportDir := os.Getenv("WINKUBE_E2E_REPORT")
	if reportDir == "" {
		reportDir = filepath.Join(root, "bin", "e2e-upstream")
	}
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		t.Fatal(err)
	}
	procs := 6
	if p, err := strconv.Atoi(os.Getenv("WINKUBE_E2E_PROCS")); err == nil && p > 0 {
		procs = p
	}

	start := time.Now()
	o := localworld.Options{
		Name: "upstream", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3", ControlPlaneNodes: 1, LinuxNodes: 1, WindowsNodes: 2,
		WindowsVersion: infrav1.WindowsServer2022, StateDir: t.TempDir(), Bin: bin,
		Progress: func(s string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), s) },
		Log:      log.Log,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
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
	_, kubeconfig, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "workload.kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("world ready after %s; running the upstream specs", time.Since(start).Round(time.Second))

	runCtx, stop := context.WithTimeout(context.Background(), 45*time.Minute)
	defer stop()
	logPath := filepath.Join(reportDir, "ginkgo.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.CommandContext(runCtx, ginkgo,
		"--procs="+strconv.Itoa(procs), "--timeout=40m", "--no-color",
		"--focus="+Focus, "--skip="+SkipRegexp(),
		e2e, "--",
		"--kubeconfig="+kc, "--node-os-distro=windows", "--provider=skeleton",
		// The framework's own JUnit report, written once by the first
		// process with every process's specs (test/e2e/framework/
		// test_context.go, ReportDir): Ginkgo's --junit-report looks for
		// a per-suite file a precompiled binary does not write.
		"--report-dir="+reportDir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	runStart := time.Now()
	runErr := cmd.Run()
	t.Logf("upstream specs ran for %s (%v); Ginkgo's log: %s", time.Since(runStart).Round(time.Second), runErr, logPath)

	f, err := os.Open(filepath.Join(reportDir, "junit_01.xml"))
	if err != nil {
		t.Fatalf("no JUnit report (%v): see %s", err, logPath)
	}
	defer f.Close()
	results, err := ReadJUnit(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) == 0 {
		t.Fatalf("the JUnit report lists no spec: see %s", logPath)
	}
	sum := Summary(results)
	if err := os.WriteFile(filepath.Join(reportDir, "summary.txt"), []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Print(sum)
	for _, r := range results {
		if r.Failed() {
			t.Errorf("%s: %s", r.Name, r.Why)
		}
	}
}
