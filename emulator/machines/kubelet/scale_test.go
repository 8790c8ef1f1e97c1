package kubelet_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// requests counts a client's requests by "VERB resource" (WATCH for a
// watch, LIST for a collection GET).
type requests struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *requests) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func (c *requests) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	return t
}

type countingTransport struct {
	rt http.RoundTripper
	c  *requests
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	verb, res := r.Method, "other"
	// /api/v1/RES[/NAME[/SUB]] or /apis/G/V/RES..., namespaced with
	// namespaces/NS/ before RES.
	i := 2
	if len(seg) > 0 && seg[0] == "apis" {
		i = 3
	}
	if len(seg) > i+1 && seg[i] == "namespaces" {
		i += 2
	}
	if len(seg) > i {
		res = seg[i]
		if verb == http.MethodGet && len(seg) == i+1 {
			verb = "LIST"
			if r.URL.Query().Get("watch") == "true" {
				verb = "WATCH"
			}
		}
		if len(seg) > i+2 {
			res += "/" + seg[i+2]
		}
	}
	t.c.mu.Lock()
	t.c.n[verb+" "+res]++
	t.c.mu.Unlock()
	return t.rt.RoundTrip(r)
}

// counted is a client whose requests c counts.
func counted(cfg *rest.Config, c *requests) kubernetes.Interface {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, c} })
	return kubernetes.NewForConfigOrDie(cfg)
}

// startAPIServer is the package's shared control plane for a test. A
// benchmark starts one of its own: the API server's CPU it reports is
// then its kubelets' load alone.
func startAPIServer(tb testing.TB) *testenv.Env {
	tb.Helper()
	ctrllog.SetLogger(logr.Discard())
	if _, bench := tb.(*testing.B); !bench {
		return kubelet.SharedAPIServer(tb)
	}
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.Stop() })
	return env
}

// hostAddresses are loopback addresses no running world uses, for the
// kubelets' API ports.
func hostAddresses(tb testing.TB) func() netip.Addr {
	tb.Helper()
	block, err := hostnet.ClaimBlock(-1)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(block.Release)
	next := block.Hosts.Addr()
	return func() netip.Addr {
		next = next.Next()
		if next.As4()[3] == 0 || next.As4()[3] == 255 {
			next = next.Next()
		}
		return next
	}
}

func nodeConfig(name string, client kubernetes.Interface, addr netip.Addr) kubelet.Config {
	return kubelet.Config{
		NodeName: name, Client: client, Address: addr, Host: kubelet.Host{OS: "linux", Arch: "amd64", KubeletVersion: "v1.36.3"},
		Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
		},
		NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v1.36.3", ContainerRuntimeVersion: "containerd://1.7.24"},
	}
}

// The kubelet renews its lease as the kubelet's lease controller does:
// from the lease it last wrote, so a renewal is one write; when someone
// else changed the lease (a conflict) or deleted it, it reads or creates
// it again and renews on.
func TestLeaseRenewedFromTheLastWrite(t *testing.T) {
	// It waits on heartbeats; its Node, lease and request counts are its
	// own: it waits beside the package's other parallel tests.
	t.Parallel()
	env := startAPIServer(t)
	ctx := context.Background()
	c := &requests{n: map[string]int{}}
	cfg := nodeConfig("lease-node", counted(env.Config, c), hostAddresses(t)())
	cfg.HeartbeatInterval = 100 * time.Millisecond
	k, err := kubelet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	leases := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renewals := func(after time.Time, n int) {
		t.Helper()
		seen := map[string]bool{}
		poll.Until(t, time.Minute, func() string {
			l, err := leases.Get(ctx, "lease-node", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(after) {
				seen[l.Spec.RenewTime.String()] = true
			}
			if len(seen) < n {
				return fmt.Sprintf("%d renewals seen, want %d", len(seen), n)
			}
			return ""
		})
	}
	renewals(time.Time{}, 3)
	gets, puts := c.get("GET leases"), c.get("PUT leases")
	renewals(time.Now(), 5)
	if c.get("PUT leases") < puts+5 {
		t.Fatalf("%d lease writes for 5 renewals", c.get("PUT leases")-puts)
	}
	if n := c.get("GET leases") - gets; n != 0 {
		t.Fatalf("the kubelet read its lease %d times while renewing it undisturbed", n)
	}

	// Someone else writes the lease: the kubelet's next write conflicts,
	// it reads the lease again and renews it, keeping the other's change.
	// The other writer retries its own write when a renewal lands between
	// its read and its write (every 100 ms here), as any careful writer does.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, "lease-node", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Annotations = map[string]string{"example.com/touched": "yes"}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	renewals(time.Now(), 2)
	var l *coordinationv1.Lease
	if l, err = leases.Get(ctx, "lease-node", metav1.GetOptions{}); err != nil || l.Annotations["example.com/touched"] != "yes" {
		t.Fatalf("the renewal after a conflict lost the other writer's change: %v %v", l.Annotations, err)
	}
	if c.get("GET leases") == gets {
		t.Fatal("the kubelet renewed a lease changed under it without reading it again")
	}

	// Deleted: created again, owned by the node.
	if err := leases.Delete(ctx, "lease-node", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	renewals(time.Now(), 1)
	if l, err = leases.Get(ctx, "lease-node", metav1.GetOptions{}); err != nil || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" {
		t.Fatalf("the recreated lease: %+v %v", l, err)
	}
}

// cpuTime is the CPU the processes have used (user and system), from
// /proc/PID/stat in clock ticks of 10 ms.
func cpuTime(pids ...int) time.Duration {
	var ticks int64
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// controlPlane is the pids of the test's etcd and kube-apiserver: this
// process's children of those names.
func controlPlane() []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		comm := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) && (comm == "etcd" || comm == "kube-apiserver") {
			out = append(out, pid)
		}
	}
	return out
}

func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkKubelets100 runs 100 simulated kubelets against a real API
// server and measures what they cost while the nodes idle (no pods: the
// lease every 10 s, status every 5 minutes, the pod watch). Each
// iteration is one lease interval, 10 s:
//
//	go test ./emulator/machines/kubelet -run '^$' -bench Kubelets100 -benchtime 3x
//
// register-ms/node is the wall time to register the 100 nodes;
// bytes/node the heap they hold; cpu-ms/node-minute this process's CPU
// (the kubelets and their clients) and apiserver-cpu-ms/node-minute the
// API server's and etcd's; requests/node-minute what they sent.
func BenchmarkKubelets100(b *testing.B) {
	const nodes = 100
	env := startAPIServer(b)
	addr := hostAddresses(b)
	c := &requests{n: map[string]int{}}
	client := counted(env.Config, c)
	ctx := context.Background()
	heap0 := heapInUse()
	start := time.Now()
	ks := make([]*kubelet.Kubelet, 0, nodes)
	defer func() {
		for _, k := range ks {
			k.Stop()
		}
	}()
	for i := range nodes {
		k, err := kubelet.Start(ctx, nodeConfig(fmt.Sprintf("bench-node-%03d", i), client, addr()))
		if err != nil {
			b.Fatal(err)
		}
		ks = append(ks, k)
	}
	register := time.Since(start)
	// Every node has its lease before the window opens.
	admin := kubernetes.NewForConfigOrDie(env.Config)
	poll.Until(b, 2*time.Minute, func() string {
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) < nodes {
			return fmt.Sprintf("leases: %v %v", len(l.Items), err)
		}
		return ""
	})
	bytes := heapInUse() - heap0
	cp := controlPlane()
	req0, cpu0, cp0 := c.total(), rusage(), cpuTime(cp...)
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		time.Sleep(10 * time.Second)
	}
	b.StopTimer()
	minutes := time.Since(t0).Minutes()
	perNodeMinute := func(v float64) float64 { return v / nodes / minutes }
	b.ReportMetric(float64(register.Milliseconds())/nodes, "register-ms/node")
	b.ReportMetric(float64(bytes)/nodes, "bytes/node")
	b.ReportMetric(perNodeMinute(float64((rusage() - cpu0).Milliseconds())), "cpu-ms/node-minute")
	b.ReportMetric(perNodeMinute(float64((cpuTime(cp...) - cp0).Milliseconds())), "apiserver-cpu-ms/node-minute")
	b.ReportMetric(perNodeMinute(float64(c.total()-req0)), "requests/node-minute")
}
