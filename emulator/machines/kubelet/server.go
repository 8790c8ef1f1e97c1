package kubelet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// server is the kubelet API, reduced to what the API server calls on a
// simulated node: port-forward (Cluster API reaches etcd with it),
// container logs and health.
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
	for _, p := range []string{"/exec/", "/attach/", "/run/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "containers on winkube's simulated nodes run no processes: exec, attach and run are not available", http.StatusNotImplemented)
		})
	}
	s := &server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *server) close() error { return s.srv.Close() }

// servePortForward forwards to the node's own address, which is where a
// host-network pod's ports are; other pods run no process to reach.
func (k *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("pod")
	pod, err := k.cfg.Client.CoreV1().Pods(ns).Get(r.Context(), name, getOpts)
	if err != nil || pod.Spec.NodeName != k.cfg.NodeName {
		http.Error(w, fmt.Sprintf("pod %s/%s is not on node %s", ns, name, k.cfg.NodeName), http.StatusNotFound)
		return
	}
	hostNet := pod.Spec.HostNetwork
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, forwarder{addr: k.cfg.Address, hostNet: hostNet}, name, string(pod.UID), opts, 4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
}

type forwarder struct {
	addr    netip.Addr
	hostNet bool
}

func (f forwarder) PortForward(ctx context.Context, name, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	if !f.hostNet {
		return fmt.Errorf("pod %s runs no process on a simulated node: nothing listens on port %d", name, port)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(f.addr.String(), strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("failed to connect to port %d of pod %s: %w", port, name, err)
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
		_, _ = io.WriteString(w, b.String())
		return
	}
	http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", c, name), http.StatusBadRequest)
}

func selfSigned(name string, addr netip.Addr) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name + "@" + strconv.FormatInt(time.Now().Unix(), 10)},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{name}, IPAddresses: []net.IP{net.IP(addr.AsSlice())},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

var getOpts = metav1.GetOptions{}
