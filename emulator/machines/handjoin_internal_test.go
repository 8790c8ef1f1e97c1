package machines

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/machines/vmshell"
)

// TestHandJoinRecordsTheNodeUnderTheLock: a join by hand records the
// machine's node name, cluster endpoint and containerd where the runtime's
// other goroutines (Nodes, a pod's instance metadata) read them under r.mu,
// while kubeadm's discovery is under way. Under -race a write without the
// lock is reported; without -race the test checks the recorded values.
func TestHandJoinRecordsTheNodeUnderTheLock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// An API server that accepts the connection and never answers keeps
	// discovery waiting until its timeout, with the fields already set.
	// A second of it is some two hundred reads at the readers' 5 ms tick.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	r := &Runtime{opts: Options{Log: logr.Discard(), JoinTimeout: time.Second, KubeletHealthCheckTimeout: time.Second},
		machines: map[string]*machine{}, clusters: map[string]*workloadCluster{}, halted: map[string]string{}, proxies: kubeProxies{all: map[string]*sharedProxy{}}}
	m := &machine{arm: arm.Machine{Name: "byo-win-1", ID: "/test/byo-win-1", OS: "Windows", IMDS: "imds-of-byo-win-1"}, dir: t.TempDir(),
		booted: make(chan struct{}), cancel: func() {}, ctx: ctx, host: netip.MustParseAddr("127.0.0.1")}
	close(m.booted)
	m.logs = vmdisk.NewLogs(m.disk(""))
	r.machines[key(m.arm.ID)] = m

	done := make(chan int)
	var lines []string
	go func() {
		done <- handHost{r, m}.KubeadmJoin(ctx, vmshell.HandJoin{APIServer: silent.Addr().String(), Token: "abcdef.0123456789abcdef",
			CACertHash: "sha256:" + strings.Repeat("0", 64), CRISocket: "npipe:////./pipe/containerd-containerd", NodeName: "BYO-WIN-1",
			KubeletVersion: "v1.34.2", ContainerdVersion: "2.1.4", ContainersFeature: true, KubeletService: true}, func(l string) { lines = append(lines, l) })
	}()
	imds := r.nodeIMDS(silent.Addr().String())
	seen := false
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for code := -1; code < 0; {
		select {
		case code = <-done:
			if code == 0 {
				t.Fatalf("kubeadm join against an API server that never answers succeeded:\n%s", strings.Join(lines, "\n"))
			}
		case <-tick.C:
			// The readers the runtime's other goroutines run, under r.mu.
			for _, n := range r.Nodes() {
				seen = seen || n.NodeName == "byo-win-1"
			}
			seen = seen || imds("byo-win-1") == "imds-of-byo-win-1"
		}
	}
	if !seen {
		t.Error("while kubeadm join discovered the cluster, no reader saw node byo-win-1 of that endpoint")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.nodeName != "byo-win-1" || m.containerd != "2.1.4" {
		t.Errorf("recorded node %q, containerd %q", m.nodeName, m.containerd)
	}
}

// A machine joined by hand starts its kubelet at boot only when the join
// script's services are registered, as Windows' service control manager
// starts them; a kubelet that is no service does not come back.
func TestHandJoinedKubeletStartsAtBootOnlyAsAService(t *testing.T) {
	joined := vmshell.State{Services: map[string]bool{"kubelet": true, "containerd": true}, Node: "byo-win-1"}
	if start, why := servicesAtBoot(joined, true); !start {
		t.Errorf("registered kubelet and containerd services: not started (%s)", why)
	}
	if start, _ := servicesAtBoot(joined, false); start {
		t.Error("a machine never joined (no kubelet.conf) started a kubelet")
	}
	noKubelet := vmshell.State{Services: map[string]bool{"containerd": true}, Node: "byo-win-1"}
	if start, why := servicesAtBoot(noKubelet, true); start || !strings.Contains(why, "no kubelet service is registered") {
		t.Errorf("no kubelet service: start %v (%s)", start, why)
	}
	noContainerd := vmshell.State{Services: map[string]bool{"kubelet": true}, Node: "byo-win-1"}
	if start, why := servicesAtBoot(noContainerd, true); start || !strings.Contains(why, "its dependency containerd is no service") {
		t.Errorf("no containerd service: start %v (%s)", start, why)
	}
}

// TestNoKubeletOnASwitchedOffMachine: a join by hand runs in a shell
// session, not in the boot a restart waits for, so its kubelet can come up
// after the machine was switched off (a restart or stop through Azure
// while the join ran). Such a kubelet must not run on: nothing would stop
// it, and it would keep the node's lease fresh and the kubelet's port
// bound against the machine's next boot, whose kubelet then fails to
// start.
func TestNoKubeletOnASwitchedOffMachine(t *testing.T) {
	r := &Runtime{opts: Options{Log: logr.Discard()},
		machines: map[string]*machine{}, clusters: map[string]*workloadCluster{}, halted: map[string]string{}, proxies: kubeProxies{all: map[string]*sharedProxy{}}}
	m := &machine{arm: arm.Machine{Name: "byo-win-1", ID: "/test/byo-win-1", OS: "Windows"}, dir: t.TempDir(),
		booted: make(chan struct{}), cancel: func() {}, ctx: context.Background(), host: netip.MustParseAddr("127.0.0.1"), nodeName: "byo-win-1"}
	close(m.booted)
	m.logs = vmdisk.NewLogs(m.disk(""))
	r.machines[key(m.arm.ID)] = m
	if err := r.Halt(context.Background(), m.arm.ID); err != nil {
		t.Fatal(err)
	}
	err := r.startKubelet(context.Background(), m, nil, nil, handRegistration("byo-win-1", "npipe:////./pipe/containerd-containerd", nil), nil, nil, m.host, "v1.36.3")
	if !errors.Is(err, errSwitchedOff) {
		t.Fatalf("a kubelet started on a machine switched off: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.kubelet != nil || m.proxyNode != nil {
		t.Errorf("the switched-off machine has a kubelet %v or a kube-proxy configuration %v", m.kubelet, m.proxyNode)
	}
}
