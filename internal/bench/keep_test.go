package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeLog writes a log file of a fake machine's disk, at the host path
// the machine runtime gives it (vmdisk.LogPath under machines/NAME/root).
func writeLog(t *testing.T, dir, machine, osPath, text string) string {
	t.Helper()
	p := filepath.Join(dir, "machines", machine, "root", filepath.FromSlash(osPath))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	windowsEvents  = "Program Files/Cloudbase Solutions/Cloudbase-Init/log/cloudbase-init.log"
	windowsKubelet = "var/log/kubelet/kubelet.log"
	linuxEvents    = "var/log/cloud-init-output.log"
)

// TestFinishStateKeepsFailedRun: a run that failed keeps its state
// directory, and its error still says what failed, then where the
// directory is and the logs of the node that never became Ready; a run
// that completed leaves nothing behind.
func TestFinishStateKeepsFailedRun(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, "bench-bench-md-win-a", windowsEvents, "booting\n")
	writeLog(t, dir, "bench-bench-md-win-a", windowsKubelet, "Successfully registered node bench-win-a (windows/amd64, Windows Server 2022 Datacenter)\n")
	bEvents := writeLog(t, dir, "bench-bench-md-win-b", windowsEvents, "booting\n")
	bKubelet := writeLog(t, dir, "bench-bench-md-win-b", windowsKubelet, "Successfully registered node bench-win-b (windows/amd64, Windows Server 2022 Datacenter)\n")
	writeLog(t, dir, "bench-bench-md-lin-c", linuxEvents, "joining\n")

	failed := errors.New("cluster bench not ready: nodes Ready 2/3 (not Ready: bench-win-b)")
	err := FinishState(dir, []string{"bench-win-b"}, failed)
	if _, statErr := os.Stat(dir); statErr != nil {
		t.Fatalf("the failed run's state directory is gone: %v", statErr)
	}
	if !errors.Is(err, failed) {
		t.Errorf("the run's error is not kept under the message: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{failed.Error(), "the world's state is kept in " + dir, "those of the nodes not Ready:",
		"bench-bench-md-win-b: events " + bEvents + ", kubelet log " + bKubelet} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "bench-bench-md-win-a") {
		t.Errorf("the error names a Ready node's machine:\n%s", msg)
	}

	// No node known (the bring-up failed before any registered): every
	// machine, the one whose kubelet never started first.
	msg = FinishState(dir, nil, failed).Error()
	lin, win := strings.Index(msg, "bench-bench-md-lin-c: events "), strings.Index(msg, "bench-bench-md-win-a:")
	if lin < 0 || win < 0 || lin > win || !strings.Contains(msg, "kubelet log (none written)") {
		t.Errorf("want every machine, the one without a kubelet log first:\n%s", msg)
	}

	if err := FinishState(dir, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) {
		t.Errorf("a completed run's state directory is still there: %v", statErr)
	}
}
