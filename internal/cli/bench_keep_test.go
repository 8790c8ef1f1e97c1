package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/bench/measure"
)

// TestMeasureKeepsStateWhenStartFails: a bring-up that fails (here the
// world cannot start: no control-plane binaries) keeps the scratch
// directory it made and names it; no world boots. It is here rather than
// in package measure, whose only test it would be: this package's test
// binary links the world already, and one more that did cost a link of
// the whole world in every `go test ./...`.
//
// The scratch directory's parent is an option, not $TMPDIR: TestMain's
// control planes start in the background, and envtest makes their etcd's
// data directory under $TMPDIR. One started while this test had set it
// (t.Setenv is process-wide), so this test's cleanup removed a running
// etcd's data, failed on the files it kept writing, and the control plane
// of another test never came up.
func TestMeasureKeepsStateWhenStartFails(t *testing.T) {
	tmp := t.TempDir()
	_, err := measure.Run(context.Background(), measure.Options{Size: "1+0+1", Bin: t.TempDir(), KubernetesVersion: "v1.36.3",
		Timeout: time.Minute, Progress: func(string) {}, ScratchParent: tmp})
	if err == nil {
		t.Fatal("a world started without binaries")
	}
	kept, _ := filepath.Glob(filepath.Join(tmp, "winkube-bench-*"))
	if len(kept) != 1 {
		t.Fatalf("kept state directories %v, want one; error: %v", kept, err)
	}
	if !strings.Contains(err.Error(), "the world's state is kept in "+kept[0]) {
		t.Errorf("the error does not name the kept directory %s:\n%v", kept[0], err)
	}
}
