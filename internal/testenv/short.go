package testenv

import "testing"

// SkipIfShort skips a test under `go test -short`, the fast loop (`make
// test-short`): unit, envtest and emulator tests only. It is for the tests
// that boot a world of real processes (a local world, a workload cluster's
// control plane in the machine runtime, clusterctl installing Cluster API)
// and so take minutes each on a 2-core machine. what says what the test
// boots. `make test`, which CI runs, passes no -short and runs them all.
func SkipIfShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s; run without -short (make test)", what)
	}
}
