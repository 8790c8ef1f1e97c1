package localworld_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"

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
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w, err := localworld.Start(ctx, killedWorld(dir, bin))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.CreateCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.WriteKubeconfigs(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %s\n", strings.TrimPrefix(w.Config.Host, "https://"))
	select {} // until killed
}

// killedWorld is the world the helper starts and the test starts again: a
// control plane (real etcd and kube-apiserver processes) and a Windows
// worker (a simulated kubelet that joined).
func killedWorld(dir, bin string) localworld.Options {
	return localworld.Options{Name: "killed", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3",
		ControlPlaneNodes: 1, WindowsNodes: 1, WindowsVersion: "2022", StateDir: dir, Bin: bin}
}

// savedVMs lists the VMs in the emulator's state file with their
// provisioning state; the file may be missing or mid-replace (then none).
func savedVMs(dir string) map[string]string {
	b, err := os.ReadFile(filepath.Join(dir, "emulator.json"))
	if err != nil {
		return nil
	}
	var st struct {
		Resources []struct {
			ID                string `json:"id"`
			ProvisioningState string `json:"provisioningState"`
			Body              struct {
				Properties struct {
					ProvisioningState string `json:"provisioningState"`
				} `json:"properties"`
			} `json:"body"`
		} `json:"resources"`
	}
	if json.Unmarshal(b, &st) != nil {
		return nil
	}
	out := map[string]string{}
	for _, r := range st.Resources {
		if strings.Contains(strings.ToLower(r.ID), "/providers/microsoft.compute/virtualmachines/") {
			state := r.Body.Properties.ProvisioningState
			if r.ProvisioningState != "" {
				state = r.ProvisioningState
			}
			out[strings.ToLower(r.ID)] = state
		}
	}
	return out
}

// bootIDs are the nodes' boot IDs by node name: a machine that boots
// again reports a new one, as a rebooted node does.
func bootIDs(ctx context.Context, cs kubernetes.Interface) (map[string]string, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Status.NodeInfo.BootID
	}
	return out, nil
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	// A zombie has exited; its parent (init here) has yet to reap it.
	return err == nil && !strings.Contains(string(b[strings.LastIndexByte(string(b), ')')+1:]), " Z ")
}

// A winkube killed with SIGKILL takes its management plane and its
// machines with it: no etcd or kube-apiserver keeps the world's ports or
// data. The world starts again from the same state directory with its
// machines, as after a clean stop: the same VMs in ARM (their state was
// kept on disk as it changed), booted again, their nodes Ready.
func TestKilledWinkubeLeavesNothing(t *testing.T) {
	testenv.SkipIfShort(t, "a booted local world")
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
	// The emulator's state on disk has the VMs, as it changed; the kill
	// loses nothing a clean stop would have saved.
	var vmsBefore map[string]string
	poll.Until(t, time.Minute, func() string {
		vmsBefore = savedVMs(dir)
		if len(vmsBefore) != 2 {
			return fmt.Sprintf("the saved state holds VMs %v, want the world's 2", vmsBefore)
		}
		for id, st := range vmsBefore {
			if st != "Succeeded" {
				return fmt.Sprintf("saved VM %s is %s", id, st)
			}
		}
		return ""
	})
	wcfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "killed.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	wcfg.Timeout = 10 * time.Second
	cs := kubernetes.NewForConfigOrDie(wcfg)
	bootBefore, err := bootIDs(context.Background(), cs)
	if err != nil || len(bootBefore) != 2 {
		t.Fatalf("the world's nodes before the kill: %v (%v), want 2", bootBefore, err)
	}
	children := localworld.Descendants(cmd.Process.Pid)
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
	// and the world starts on the same etcd data with the same machines.
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w, err := localworld.Start(ctx, killedWorld(dir, bin))
	if err != nil {
		t.Fatalf("the world does not start again after the kill: %v", err)
	}
	defer w.Stop()
	vmsAfter := map[string]bool{}
	for _, id := range w.Emulator().ResourceIDs() {
		if strings.Contains(strings.ToLower(id), "/providers/microsoft.compute/virtualmachines/") {
			vmsAfter[strings.ToLower(id)] = true
		}
	}
	if len(vmsAfter) != len(vmsBefore) {
		t.Fatalf("VMs in ARM after the restart %v, before the kill %v", vmsAfter, vmsBefore)
	}
	for id := range vmsBefore {
		if !vmsAfter[id] {
			t.Fatalf("VM %s is gone from ARM after the restart (have %v)", id, vmsAfter)
		}
	}
	if err := w.CreateCluster(ctx); err != nil {
		t.Fatal(err)
	}
	// Every node boots again (a new boot ID) and is Ready: its kubelet
	// runs, not a Node object left from before the kill.
	poll.Until(t, 6*time.Minute, func() string {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "workload API server: " + err.Error()
		}
		if len(nodes.Items) != len(bootBefore) {
			return fmt.Sprintf("%d nodes, want the %d of before", len(nodes.Items), len(bootBefore))
		}
		for _, n := range nodes.Items {
			before, ok := bootBefore[n.Name]
			if !ok {
				return "node " + n.Name + " is new: the machines were made again, not resumed"
			}
			if n.Status.NodeInfo.BootID == before {
				return "node " + n.Name + " has not booted again"
			}
			if !util.IsNodeReady(&n) {
				return "node " + n.Name + " is not Ready"
			}
		}
		return ""
	})
	if n := len(w.Runtime().Nodes()); n != len(vmsBefore) {
		t.Fatalf("the runtime runs %d machines, want %d", n, len(vmsBefore))
	}
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ms := &clusterv1.MachineList{}
	if err := w.Client.List(ctx, ms); err != nil || len(ms.Items) != 2 {
		t.Fatalf("machines after the restart: %d (%v), want the 2 of before", len(ms.Items), err)
	}
}
