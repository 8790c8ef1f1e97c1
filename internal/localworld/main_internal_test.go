package localworld

import (
	"os"
	"testing"

	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

// sharedAPI is the bare API server of the tests that need one and nothing
// of a world (the admission's rights, the workload kubeconfig's cache):
// one start of kube-apiserver and etcd costs more than both tests. Tests
// that boot a world, or start a management plane of their own, do not use
// it.
var sharedAPI = &testenv.Shared{Options: testenv.Options{Scheme: scheme.New()}}

func TestMain(m *testing.M) {
	testenv.Prestart(sharedAPI)
	code := m.Run()
	testenv.StopShared(sharedAPI)
	os.Exit(code)
}
