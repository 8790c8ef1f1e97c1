package localworld

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/machines/hostproc"
)

// The management plane's etcd and kube-apiserver, which envtest starts
// through their launchers with winkube's environment, run with the
// collector's target the world's Go programs share, or with the user's
// GOGC when one is set; the arguments reach the binary as given.
func TestLaunchersPassTheWorldsGOGC(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "etcd"), []byte("#!/bin/sh\necho \"GOGC=$GOGC $*\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	launchers, err := dieWithWinkube(t.TempDir(), bin, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, set, want string
	}{
		{name: "unset", want: strconv.Itoa(hostproc.GCPercent)},
		{name: "the user's", set: "off", want: "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.set)
			if tc.set == "" {
				os.Unsetenv("GOGC")
			}
			out, err := exec.Command(launchers["etcd"], "--name", "a b").CombinedOutput()
			if err != nil {
				t.Fatalf("launcher: %v: %s", err, out)
			}
			if got, want := strings.TrimSpace(string(out)), "GOGC="+tc.want+" --name a b"; got != want {
				t.Errorf("the binary saw %q, want %q", got, want)
			}
		})
	}
}
