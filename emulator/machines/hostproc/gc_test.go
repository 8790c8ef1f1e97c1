package hostproc

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

// A started program gets GCPercent when the user set no GOGC, and the
// user's GOGC as it is otherwise, even an empty one (Go's default).
func TestEnvGOGC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   *string
		wants string
	}{
		{name: "unset", wants: "GOGC=" + strconv.Itoa(GCPercent)},
		{name: "the user's", set: ptr.To("50"), wants: "GOGC=50"},
		{name: "empty", set: ptr.To(""), wants: "GOGC="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", "")
			if tc.set == nil {
				os.Unsetenv("GOGC")
			} else {
				os.Setenv("GOGC", *tc.set)
			}
			var gogc []string
			for _, kv := range Env() {
				if strings.HasPrefix(kv, "GOGC=") {
					gogc = append(gogc, kv)
				}
			}
			if !slices.Equal(gogc, []string{tc.wants}) {
				t.Errorf("the environment's GOGC: %q, want %q alone", gogc, tc.wants)
			}
		})
	}
}
