package controlplane

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/winkube/winkube/emulator/machines/hostproc"
)

// A control-plane process runs with the collector's target the world's Go
// programs share (hostproc.Env, whose handling of a user's GOGC its own
// test covers).
func TestProcessRunsWithTheWorldsGOGC(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	p, err := start("etcd", "/bin/sh", []string{"-c", `echo "GOGC=$GOGC"`}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, tail, ok := p.Wait(ctx)
	if !ok || code != 0 {
		t.Fatalf("the process ended with %d (ended: %v)", code, ok)
	}
	if got, want := strings.TrimSpace(tail), "GOGC="+strconv.Itoa(hostproc.GCPercent); got != want {
		t.Errorf("the process saw %q, want %q", got, want)
	}
}
