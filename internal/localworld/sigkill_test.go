package localworld_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// TestHelperWorld is not a test: TestKilledWinkubeLeavesNothing runs this
// test binary again with WINKUBE_HELPER_WORLD set, to play a winkube that
// starts a world and is then killed.
func TestHelperWorld(t *testing.T) {
	dir := os.Getenv("WINKUBE_HELPER_WORLD")
	if dir == "" {
		return
	}
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	w, err := localworld.Start(context.Background(), localworld.Options{Name: "killed", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3",
		ControlPlaneNodes: 1, WindowsVersion: "2022", StateDir: dir, Bin: bin})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %s\n", strings.TrimPrefix(w.Config.Host, "https://"))
	select {} // until killed
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	// A zombie has exited; its parent (init here) has yet to reap it.
	return err == nil && !strings.Contains(string(b[strings.LastIndexByte(string(b), ')')+1:]), " Z ")
}

// A winkube killed with SIGKILL takes its management plane with it: no
// etcd or kube-apiserver keeps the world's ports or data, and the world
// starts again from the same state directory.
func TestKilledWinkubeLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWorld$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WINKUBE_HELPER_WORLD="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var apiserver string
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if addr, ok := strings.CutPrefix(lines.Text(), "READY "); ok {
			apiserver = addr
			break
		}
	}
	if apiserver == "" {
		t.Fatalf("the helper world did not start: %v", lines.Err())
	}
	children := descendants(cmd.Process.Pid)
	var names []string
	for _, p := range children {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		names = append(names, strings.TrimSpace(string(comm)))
	}
	joined := strings.Join(names, " ")
	if !strings.Contains(joined, "etcd") || !strings.Contains(joined, "kube-apiserver") {
		t.Fatalf("the world's processes are %q: want etcd and kube-apiserver among them", joined)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// Whatever outlives the test is killed, so a failure leaves nothing.
	defer func() {
		for _, p := range children {
			if alive(p) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	}()
	poll.Until(t, 3*time.Minute, func() string {
		var left []string
		for i, p := range children {
			if alive(p) {
				left = append(left, fmt.Sprintf("%s (%d)", names[i], p))
			}
		}
		if len(left) > 0 {
			return "processes outlived the killed winkube: " + strings.Join(left, ", ")
		}
		return ""
	})
	if c, err := net.DialTimeout("tcp", apiserver, time.Second); err == nil {
		c.Close()
		t.Fatalf("the management API server's port %s still answers", apiserver)
	}
	// The state directory is free again: the lock went with the process,
	// and the world starts on the same etcd data.
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	w, err := localworld.Start(context.Background(), localworld.Options{Name: "killed", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3",
		ControlPlaneNodes: 1, WindowsVersion: "2022", StateDir: dir, Bin: bin})
	if err != nil {
		t.Fatalf("the world does not start again after the kill: %v", err)
	}
	w.Stop()
}
