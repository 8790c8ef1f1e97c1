package startneeds

import (
	"os"
	"testing"

	"github.com/winkube/winkube/internal/testenv"
)

// apiServer is the control plane the package's tests share: each started
// one of its own before, most of the package's CPU. They keep apart by
// what they touch (the Node n of one test, the ClusterRole get-nodes of
// another) or touch nothing: the sessions only list and watch.
var apiServer = &testenv.Shared{}

func TestMain(m *testing.M) {
	testenv.Prestart(apiServer)
	code := m.Run()
	apiServer.Stop()
	os.Exit(code)
}
