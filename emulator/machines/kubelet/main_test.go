package kubelet

import (
	"os"
	"testing"

	"github.com/winkube/winkube/internal/testenv"
)

// apiServer is the control plane the package's tests share, each with
// Nodes and pods of its own names. The API server reaches a node's
// kubelet at its InternalIP (the tests' node names do not resolve), as
// winkube's control planes configure it (controlplane/components.go).
var apiServer = &testenv.Shared{Options: testenv.Options{
	APIServerFlags: map[string]string{"kubelet-preferred-address-types": "InternalIP"},
}}

// SharedAPIServer is apiServer for the package's external tests.
func SharedAPIServer(tb testing.TB) *testenv.Env { return apiServer.Env(tb) }

// The parallel tests mostly wait (the kubelet's registration backoff,
// probe periods, the seconds between two scrapes): more of them run at
// once than there are cores.
func TestMain(m *testing.M) {
	testenv.WaitingTests(8)
	testenv.Prestart(apiServer)
	code := m.Run()
	apiServer.Stop()
	os.Exit(code)
}
