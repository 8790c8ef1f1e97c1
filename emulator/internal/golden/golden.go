// Package golden runs table tests kept as files, in kwok's golden style: a
// testdata/<dir>/<case>.input.yaml beside its <case>.output.yaml
// (kubernetes-sigs/kwok kustomize/stage/pod/general/testdata/
// pod-create.input.yaml and .output.yaml, 8ca8488a). Tests of the machine
// runtime use it to check what a function makes of an input without
// booting a world.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Run runs each testdata/<dir>/<case>.input.yaml as a parallel subtest
// named <case>: in is read strictly into a fresh T, run makes the output,
// which must equal <case>.output.yaml (`go test -run X -update` rewrites
// the outputs; review their diff). Fewer than min cases fail the test, so
// that missing files do not pass as nothing to check.
func Run[T any](t *testing.T, dir string, min int, run func(t *testing.T, in *T) []byte) {
	t.Helper()
	inputs, err := filepath.Glob(filepath.Join("testdata", dir, "*.input.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < min {
		t.Fatalf("found %d cases in testdata/%s, want %d at least: the golden files are missing", len(inputs), dir, min)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			c := new(T)
			if err := yaml.UnmarshalStrict(raw, c); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			got := run(t, c)
			out := strings.TrimSuffix(in, ".input.yaml") + ".output.yaml"
			if *update {
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, out, got, want)
			}
		})
	}
}
