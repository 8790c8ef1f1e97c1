package arm_test

import (
	"testing"

	"github.com/winkube/winkube/internal/testenv"
)

// The package's slow tests wait out delays that are the behaviour under
// test (a token's expiry, a run command's timeout, throttling's
// Retry-After, a scale set's deletion of its extra instances), each in a
// world of its own: they run in parallel, more of them than there are
// cores.
func TestMain(m *testing.M) {
	testenv.WaitingTests(8)
	m.Run()
}
