// Package e2e builds Kubernetes' own end-to-end test binary restricted to the
// Windows suites (test/e2e/windows at the pinned k8s.io/kubernetes), so that
// the local world can be checked against the tests sig-windows runs on real
// clusters. Built with `go test -c` by `make e2e-upstream`; run against a
// booted world by internal/localworld/upstreame2e.
//
// Only test/e2e/windows is linked (not every suite under test/e2e): the full
// suite's build costs several times more CPU and the local world runs only
// the [sig-windows] focus. The suite setup (test/e2e/e2e.go: waiting for
// schedulable nodes and running kube-system pods before any test) and the flag
// registration are upstream's, as in test/e2e/e2e_test.go at
// kubernetes/kubernetes v1.36.3.
package e2e

import (
	"flag"
	"os"
	"testing"

	upstream "k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"

	_ "k8s.io/kubernetes/test/e2e/feature"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/e2e/windows"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestWindowsE2E(t *testing.T) {
	upstream.RunE2ETests(t)
}
