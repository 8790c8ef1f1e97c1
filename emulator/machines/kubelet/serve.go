package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/localports"
)

// SimulatedHeader marks every answer of a simulated container, so that a
// client (and a test) can tell it from a real application's.
const SimulatedHeader = "X-Winkube-Simulated"

// A running container's ports listen for real, so that a Service, a probe
// and curl reach the same thing. Which ports:
//   - every TCP containerPort the pod declares for the container, as the
//     issue asks: declaring a port is how a pod says its process serves it;
//   - and every port the image's process serves whether declared or not
//     (the registry catalog's Listens: CoreDNS's health and readiness ports,
//     nginx's and IIS's 80), because a real process listens on what it
//     serves and a containerPort is documentation only (the Pod API says
//     "not specifying a port here DOES NOT prevent that port from being
//     exposed"). A probe on CoreDNS's undeclared 8181 passes on a real node,
//     so it passes here.
//
// Any other port refuses connections. Whatever listens answers HTTP with
// the same page naming what runs there and saying it is a simulation: a
// simulated IIS and a simulated nginx serve no application content.

// podNet is where a pod's containers listen.
type podNet struct {
	// addr is the pod's host address: the loopback address the runtime
	// gives its pod IP, or the node's for hostNetwork and HostProcess pods.
	addr netip.Addr
	// node names the node, os its OS image and build, for the page.
	node, os string
	// held are the node address's ports a real process of the node holds
	// (the kubelet API, SSH, the static control-plane pods): a hostNetwork
	// container "listening" there shares the real process's socket.
	held map[int32]bool
	// run is Config.Run.
	run RunFunc
}

// RunFunc starts the real program behind a container whose image the
// runtime has one for (metrics-server), listening on addr, the pod's host
// address: true when it did, and the program then binds the container's
// ports itself. False leaves the container simulated: its ports serve the
// page. ctx ends when the container stops, and the program with it; a
// program that ends by itself stops answering, so that the container's
// probes fail and the kubelet restarts it, as a crashed process's
// would.
type RunFunc func(ctx context.Context, pod *corev1.Pod, c corev1.Container, addr netip.Addr) bool

// ctrServer is one listening port of a running container: the simulated
// page's server, or a port the container's real program holds (srv nil),
// whose stop ends the program.
type ctrServer struct {
	port int32
	srv  *http.Server
	stop context.CancelFunc
}

// portsOf are the TCP ports a container's process listens on.
func portsOf(c corev1.Container, img *Pulled) []int32 {
	seen := map[int32]bool{}
	var out []int32
	add := func(p int32) {
		if p > 0 && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, cp := range c.Ports {
		if cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP {
			add(cp.ContainerPort)
		}
	}
	if img != nil {
		// A flag that moves the endpoint wins over the image's default.
		moved := false
		for _, f := range img.ListenFlags {
			if v, ok := containerruntime.Arg(c, f); ok {
				if _, port, err := net.SplitHostPort(v); err == nil {
					v = port
				}
				if n, err := strconv.Atoi(v); err == nil {
					add(int32(n))
					moved = true
				}
			}
		}
		for _, l := range img.Listens {
			if moved {
				break
			}
			n, proto, _ := strings.Cut(l, "/")
			if v, err := strconv.Atoi(n); err == nil && (proto == "" || strings.EqualFold(proto, "tcp")) {
				add(int32(v))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// openPorts starts the container's servers; a port that cannot be bound is
// told as an event, as a real server's bind failure would be.
func (r *podRun) openPorts(c *ctrRun) {
	if r.net == nil || !r.net.addr.IsValid() || c.init {
		return
	}
	img := r.images[c.spec.Name]
	if r.net.run != nil {
		ctx, cancel := context.WithCancel(context.Background())
		if r.net.run(ctx, r.pod, c.spec, r.net.addr) {
			// The program holds the ports; closing them ends it.
			c.servers = append(c.servers, ctrServer{stop: cancel})
			for _, port := range portsOf(c.spec, img) {
				c.servers = append(c.servers, ctrServer{port: port})
			}
			return
		}
		cancel()
	}
	agnPort, agnHandler, agn := agnhostServes(c.spec, img, podHostname(r.pod, r.net.node))
	ports := portsOf(c.spec, img)
	if agn && !slices.Contains(ports, agnPort) {
		ports = append(ports, agnPort)
	}
	for _, port := range ports {
		addr := net.JoinHostPort(r.net.addr.String(), strconv.Itoa(int(port)))
		ln, err := localports.Listen(addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) && r.net.held[port] {
				continue // the node's own process serves it
			}
			r.event(corev1.EventTypeWarning, "Failed", "container %s: its server cannot listen on port %d: %v", c.spec.Name, port, err)
			continue
		}
		var handler http.Handler = r.page(c, img, port)
		if agn && port == agnPort {
			handler = agnHandler
		}
		srv := &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       30 * time.Second,
		}
		// One goroutine per listening port; connections get their own
		// only while open.
		go func() { _ = srv.Serve(ln) }()
		c.servers = append(c.servers, ctrServer{port: port, srv: srv})
	}
}

// closePorts stops the container's servers and drops their connections,
// as a stopped process's sockets close.
func (c *ctrRun) closePorts() {
	for _, s := range c.servers {
		if s.srv != nil {
			_ = s.srv.Close()
		}
		if s.stop != nil {
			s.stop()
		}
	}
	c.servers = nil
}

// closeAll stops every server of the pod: its sandbox is gone.
func (r *podRun) closeAll() {
	for _, c := range r.mains {
		c.closePorts()
	}
}

// listening says whether a running container of the pod serves port.
func (r *podRun) listening(port int32) bool {
	for _, c := range r.mains {
		for _, s := range c.servers {
			if s.port == port {
				return true
			}
		}
	}
	return false
}

// page is what a simulated container's port answers.
type page struct {
	pod, node, container, image, os string
	port                            int32
}

func (r *podRun) page(c *ctrRun, img *Pulled, port int32) *page {
	p := &page{pod: r.pod.Namespace + "/" + r.pod.Name, node: r.net.node, container: c.spec.Name, image: c.spec.Image, os: r.net.os, port: port}
	if img != nil && img.ImageID != "" {
		p.image += " (" + img.ImageID + ")"
	}
	return p
}

func (p *page) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	h.Set(SimulatedHeader, "true")
	h.Set("X-Winkube-Pod", p.pod)
	h.Set("X-Winkube-Node", p.node)
	h.Set("X-Winkube-Container", p.container)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	body := fmt.Sprintf(`winkube simulated container
This is a simulation: no application runs here. The container's image was
resolved for this node, but nothing of it executes, so there is no
application content to serve; every path on this port answers this page.

pod:       %s
node:      %s
container: %s
image:     %s
os:        %s
port:      %d/TCP
request:   %s %s
`, p.pod, p.node, p.container, p.image, p.os, p.port, req.Method, req.URL.RequestURI())
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if req.Method != http.MethodHead {
		_, _ = w.Write([]byte(body))
	}
}

// podNet is where a pod's containers listen: the node's address for a
// hostNetwork or HostProcess pod, else its pod IP's host address.
func (k *Kubelet) podNet(ctx context.Context, pod *corev1.Pod, hostNet bool, ip netip.Addr) *podNet {
	n := &podNet{node: k.cfg.NodeName, os: k.cfg.NodeInfo.OSImage, held: k.heldPorts(), run: k.cfg.Run}
	if v := k.cfg.NodeInfo.KernelVersion; v != "" {
		n.os += " (" + v + ")"
	}
	switch {
	case hostNet:
		n.addr = k.cfg.Address
	case k.cfg.PodAddress != nil:
		a, err := k.cfg.PodAddress(ip.String())
		if err != nil {
			k.event(ctx, pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", fmt.Sprintf("pod address %s has no host address, its ports will not be served: %v", ip, err))
			return n
		}
		n.addr = a
	}
	return n
}

// heldPorts are the ports of the node's address that its own processes
// hold: the kubelet API, SSH and the static pods' processes.
func (k *Kubelet) heldPorts() map[int32]bool {
	held := map[int32]bool{Port: true, 22: true}
	for _, sp := range k.cfg.StaticPods {
		for _, c := range sp.Spec.Containers {
			for _, p := range c.Ports {
				held[p.ContainerPort] = true
			}
			for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				switch {
				case pr == nil:
				case pr.HTTPGet != nil && pr.HTTPGet.Port.IntVal > 0:
					held[pr.HTTPGet.Port.IntVal] = true
				case pr.TCPSocket != nil && pr.TCPSocket.Port.IntVal > 0:
					held[pr.TCPSocket.Port.IntVal] = true
				}
			}
		}
	}
	return held
}
