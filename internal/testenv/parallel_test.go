package testenv

import (
	"flag"
	"testing"
)

// The raise applies only to go test's default: a -parallel given on the
// command line, or a default already higher, is kept.
func TestRaiseParallelKeepsWhatTheCommandLineSays(t *testing.T) {
	for _, c := range []struct {
		name string
		def  int
		args []string
		want string
	}{
		{"default of two cores", 2, nil, "8"},
		{"given on the command line", 2, []string{"-test.parallel=1"}, "1"},
		{"default already higher", 16, nil, "16"},
	} {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		fs.Int("test.parallel", c.def, "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		raiseParallel(fs, 8)
		if got := fs.Lookup("test.parallel").Value.String(); got != c.want {
			t.Errorf("%s: -parallel %s, want %s", c.name, got, c.want)
		}
	}
}
