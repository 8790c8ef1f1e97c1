package kubelet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cri-streaming/pkg/streaming/portforward"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
)

// server is the kubelet API, reduced to what the API server calls on a
// simulated node: port-forward (Cluster API reaches etcd with it), exec
// into a container's simulated shell, container logs and health.
type server struct {
	srv *http.Server
}

func startServer(addr string, k *Kubelet) (*server, error) {
	tlsCfg, err := serverTLS(k.cfg.NodeName, k.cfg.Address)
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", addr, tlsCfg)
	if err != nil {
		return nil, fmt.Errorf("kubelet API of node %s: %w", k.cfg.NodeName, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/portForward/{ns}/{pod}", k.servePortForward)
	mux.HandleFunc("/portForward/{ns}/{pod}/{uid}", k.servePortForward)
	mux.HandleFunc("/containerLogs/{ns}/{pod}/{container}", k.serveLogs)
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", k.serveExec)
	mux.HandleFunc("/exec/{ns}/{pod}/{uid}/{container}", k.serveExec)
	mux.HandleFunc("/attach/", serveNoProcess)
	mux.HandleFunc("/run/", serveNoProcess)
	mux.HandleFunc("GET /stats/summary", k.serveSummary)
	mux.HandleFunc("GET /metrics/resource", k.serveResourceMetrics)
	s := &server{srv: &http.Server{Handler: k.authorize(mux), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *server) close() error { return s.srv.Close() }

// servePortForward forwards to where the pod's ports are: the node's
// address for a host-network pod, the pod IP's host address for any
// other, where its running containers' simulated servers listen
// (serve.go).
func (k *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("pod")
	pod, err := k.cfg.Client.CoreV1().Pods(ns).Get(r.Context(), name, getOpts)
	if err != nil || pod.Spec.NodeName != k.cfg.NodeName {
		http.Error(w, fmt.Sprintf("pod %s/%s is not on node %s", ns, name, k.cfg.NodeName), http.StatusNotFound)
		return
	}
	f := forwarder{addr: k.cfg.Address, hostNet: pod.Spec.HostNetwork, windows: k.cfg.Host.OS == "windows", podIP: pod.Status.PodIP, sandbox: containerruntime.ContainerID(pod, "sandbox")}
	if !f.hostNet {
		if k.cfg.PodAddress == nil || pod.Status.PodIP == "" {
			http.Error(w, fmt.Sprintf("pod %s/%s has no pod IP on node %s", ns, name, k.cfg.NodeName), http.StatusInternalServerError)
			return
		}
		a, err := k.cfg.PodAddress(pod.Status.PodIP)
		if err != nil {
			http.Error(w, fmt.Sprintf("failed to get sandbox ip: %v", err), http.StatusInternalServerError)
			return
		}
		f.addr = a
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, f, name, string(pod.UID), opts, 4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
}

type forwarder struct {
	addr    netip.Addr
	hostNet bool
	windows bool
	podIP   string
	// sandbox is the pod sandbox's ID, which containerd's errors name.
	sandbox string
}

func (f forwarder) PortForward(ctx context.Context, name, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(f.addr.String(), strconv.Itoa(int(port))))
	if err != nil {
		return f.refused(name, port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// refused is containerd's error when nothing listens on the pod's port.
// Windows dials the pod IP (or localhost for a host-network pod) and
// says so (internal/cri/server/sandbox_portforward_windows.go); Linux
// dials localhost inside the pod's network namespace over IPv4, then
// IPv6 (sandbox_portforward_linux.go; containerd 301026e5). The dial
// errors are Go's for the address containerd dials, with the OS's
// connection-refused text: the Windows one (WSAECONNREFUSED's) was not
// verified against a source here.
func (f forwarder) refused(pod string, port int32, err error) error {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("failed to connect to port %d of pod %s: %w", port, pod, err)
	}
	if f.windows {
		ip := f.podIP
		if f.hostNet {
			ip = "localhost"
		}
		dialIP := ip
		if f.hostNet {
			dialIP = "127.0.0.1"
		}
		return fmt.Errorf("failed to execute portforward for podId %v, podIp %v, err: failed to connect to %s:%d for pod %q: dial tcp %s:%d: connectex: No connection could be made because the target machine actively refused it.",
			f.sandbox, ip, ip, port, f.sandbox, dialIP, port)
	}
	nsPath := "host"
	if !f.hostNet {
		nsPath = "/var/run/netns/cni-" + netnsID(f.sandbox)
	}
	return fmt.Errorf("failed to execute portforward in network namespace %q: failed to connect to localhost:%d inside namespace %q, IPv4: dial tcp4 127.0.0.1:%d: connect: connection refused IPv6 dial tcp6 [::1]:%d: connect: connection refused ",
		nsPath, port, f.sandbox, port, port)
}

// netnsID is the UUID-shaped name containerd gives a pod's network
// namespace (cni-<uuid>), derived from the sandbox so it is stable.
func netnsID(sandbox string) string {
	s := (sandbox + strings.Repeat("0", 32))[:32]
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// serveLogs returns what the simulated runtime knows of a container; it
// says plainly that no process wrote output.
func (k *Kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, c := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	pod, err := k.cfg.Client.CoreV1().Pods(ns).Get(r.Context(), name, getOpts)
	if err != nil || pod.Spec.NodeName != k.cfg.NodeName {
		http.Error(w, fmt.Sprintf("pod %s/%s is not on node %s", ns, name, k.cfg.NodeName), http.StatusNotFound)
		return
	}
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if cs.Name != c {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "winkube simulated node %s (%s): container %s, image %s\n", k.cfg.NodeName, k.cfg.Host.OS, c, cs.Image)
		switch {
		case cs.State.Running != nil:
			fmt.Fprintf(&b, "running since %s; the simulated runtime runs no process, so there is no output\n", cs.State.Running.StartedAt.UTC().Format(time.RFC3339))
		case cs.State.Waiting != nil:
			fmt.Fprintf(&b, "not started: %s: %s\n", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			fmt.Fprintf(&b, "completed with exit code %d\n", cs.State.Terminated.ExitCode)
		}
		// What the process wrote, where the runtime's model of its
		// command knows (cmd's echo, PowerShell's Write-Output).
		for _, l := range k.output(pod.UID, c) {
			fmt.Fprintln(&b, l)
		}
		_, _ = io.WriteString(w, b.String())
		return
	}
	http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", c, name), http.StatusBadRequest)
}

var getOpts = metav1.GetOptions{}

// output is what the container's last run wrote, nil when unknown.
func (k *Kubelet) output(uid types.UID, container string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.outputs[string(uid)+"/"+container]
}
