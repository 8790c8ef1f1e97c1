package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/internal/poll"
)

// behindLoadBalancer is a real API server whose clients reach it through a
// load-balancer frontend of the local network, as a node's kubelet reaches
// its cluster's control-plane endpoint; the frontend starts with no
// backend in rotation, as after a world's restart until the probe sees the
// restarted API server.
type behindLoadBalancer struct {
	lb       *hostnet.Network
	front    string
	backend  string
	admin    kubernetes.Interface
	kubelet  *rest.Config
	attempts atomic.Int32
	log      logr.Logger
}

func startBehindLoadBalancer(t *testing.T) *behindLoadBalancer {
	t.Helper()
	env := apiServer.Env(t)
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	b := &behindLoadBalancer{front: net.JoinHostPort(testAddress(t).String(), "6443"), backend: u.Host}
	if b.lb, err = hostnet.New(testAddrs.block.Hosts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.lb.Close)
	if err := b.lb.SetRules([]hostnet.Rule{{Frontend: b.front}}); err != nil {
		t.Fatal(err)
	}
	if b.admin, err = kubernetes.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	b.kubelet = rest.CopyConfig(env.Config)
	b.kubelet.Host = "https://" + b.front
	// The API server's certificate names the address it listens on.
	b.kubelet.ServerName = u.Hostname()
	b.log = funcr.New(func(_, args string) {
		if strings.Contains(args, `"msg"="registering node"`) {
			b.attempts.Add(1)
		}
	}, funcr.Options{Verbosity: 1})
	return b
}

// bringUp puts the API server in rotation behind the frontend.
func (b *behindLoadBalancer) bringUp(t *testing.T) {
	t.Helper()
	if err := b.lb.SetRules([]hostnet.Rule{{Frontend: b.front, Backends: []string{b.backend}}}); err != nil {
		t.Fatal(err)
	}
}

func (b *behindLoadBalancer) config(t *testing.T, node string) Config {
	client, err := kubernetes.NewForConfig(b.kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return Config{NodeName: node, Client: client, Address: testAddress(t), Host: linux,
		NodeInfo:   corev1.NodeSystemInfo{OSImage: "Ubuntu 24.04.1 LTS", KernelVersion: "6.8.0-1021-azure", OperatingSystem: "linux", BootID: "boot-2"},
		PodAddress: func(string) (netip.Addr, error) { return netip.Addr{}, errors.New("no pods in this test") }, Log: b.log, Disk: vmdisk.Disk{Root: t.TempDir()},
		NetworkConfigured: func() bool { return true }}
}

type started struct {
	k   *Kubelet
	err error
}

// A kubelet whose API server does not answer yet keeps trying to register,
// as the kubelet's registerWithAPIServer does, and registers (adopting its
// Node of an earlier boot) once the API server is in rotation: a world's
// workers boot again with their control-plane machine, and reach its API
// server through the load balancer only once the probe has seen it up.
func TestRegistrationWaitsForTheAPIServer(t *testing.T) {
	// It mostly waits (refused tries by design) and owns what it touches
	// on the shared API server (the Node worker-a) and its own load
	// balancer: it waits beside the package's other parallel test.
	t.Parallel()
	b := startBehindLoadBalancer(t)
	ctx := context.Background()
	// The Node of the machine's earlier boot.
	if _, err := b.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-a"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Tries at most 100ms apart (the kubelet's are 7s apart once its
	// backoff is at its cap): the test waits for many of them.
	cfg := b.config(t, "worker-a")
	cfg.RegistrationRetryCap = 100 * time.Millisecond
	begun := time.Now()
	done := make(chan started, 1)
	go func() {
		k, err := Start(ctx, cfg)
		done <- started{k, err}
	}()
	var res *started
	receive := func() bool {
		select {
		case r := <-done:
			res = &r
			if r.k != nil {
				t.Cleanup(r.k.Stop)
			}
			return true
		default:
			return false
		}
	}
	// More tries than the 30 after which the emulated kubelet used to give
	// up (a backoff of a fixed number of steps, before cdda657). Counted,
	// not timed: with the tries 100ms apart that is a few seconds, where
	// waiting out a time limit took a dozen.
	poll.Until(t, 3*time.Minute, func() string {
		if receive() {
			return ""
		}
		if n := b.attempts.Load(); n < 40 {
			return fmt.Sprintf("the kubelet has tried to register %d times in %s", n, time.Since(begun).Round(time.Second))
		}
		return ""
	})
	if res != nil {
		t.Fatalf("the kubelet stopped trying to register while its API server was out of reach: %v", res.err)
	}
	b.bringUp(t)
	poll.Until(t, 2*time.Minute, func() string {
		if res == nil && !receive() {
			return fmt.Sprintf("the kubelet has not registered yet (%d tries)", b.attempts.Load())
		}
		return ""
	})
	if res.err != nil {
		t.Fatalf("the kubelet did not register once its API server answered: %v", res.err)
	}
	n, err := b.admin.CoreV1().Nodes().Get(ctx, "worker-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.NodeInfo.BootID != "boot-2" {
		t.Fatalf("the adopted Node's boot ID is %q, want this boot's", n.Status.NodeInfo.BootID)
	}
}

// A machine switched off while its kubelet waits for the API server stops:
// the machine runtime waits for its boot to end.
func TestRegistrationEndsWithTheBoot(t *testing.T) {
	// Like TestRegistrationWaitsForTheAPIServer, it owns its Node
	// (worker-b) and load balancer.
	t.Parallel()
	b := startBehindLoadBalancer(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan started, 1)
	go func() {
		k, err := Start(ctx, b.config(t, "worker-b"))
		done <- started{k, err}
	}()
	poll.Until(t, time.Minute, func() string {
		if n := b.attempts.Load(); n < 2 {
			return fmt.Sprintf("the kubelet has tried to register %d times", n)
		}
		return ""
	})
	cancel()
	var res started
	poll.Until(t, time.Minute, func() string {
		select {
		case res = <-done:
			return ""
		default:
			return "Start has not returned since the boot's context ended"
		}
	})
	if res.k != nil {
		res.k.Stop()
		t.Fatal("the kubelet registered through a frontend with no backend")
	}
	if !errors.Is(res.err, context.Canceled) {
		t.Fatalf("Start returned %v, want the boot's end (context canceled)", res.err)
	}
}
