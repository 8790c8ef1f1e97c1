// Package metricsserver is a simulated metrics-server process: what
// kubernetes-sigs/metrics-server v0.8.0 does, modelled. Every
// --metric-resolution it reads each node's kubelet /metrics/resource,
// keeps the last two readings and serves the metrics.k8s.io/v1beta1 API
// (NodeMetrics, PodMetrics) from their difference, to the kube-apiserver's
// aggregator, which authenticates with its front-proxy client certificate
// and names the user in X-Remote-User. It is an http.Handler the machine
// runtime serves on the metrics-server container's port.
package metricsserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Options are metrics-server's flags that the model reads.
type Options struct {
	// API is how the process reaches the API server: its pod's service
	// account. Its credentials also go to the kubelets, as upstream's
	// kubelet client is a copy of the API client's configuration.
	API *rest.Config
	// MetricResolution is --metric-resolution (60s when 0, upstream's
	// default; its manifest sets 15s). Unlike the flag (ParseArgs), it
	// may be under 10s, for tests.
	MetricResolution time.Duration
	// AddressTypes is --kubelet-preferred-address-types
	// (DefaultAddressTypes when nil).
	AddressTypes []corev1.NodeAddressType
	// KubeletPort is --kubelet-port (10250 when 0); UseNodeStatusPort
	// --kubelet-use-node-status-port: the node's status's kubelet port.
	KubeletPort       int
	UseNodeStatusPort bool
	// KubeletInsecureTLS is --kubelet-insecure-tls; else KubeletCA
	// (--kubelet-certificate-authority, PEM) or the API's CA verifies
	// the kubelets' serving certificates.
	KubeletInsecureTLS bool
	KubeletCA          []byte
	// RequestHeader says whose client certificate may name the user in
	// headers; nil reads the API server's, from the ConfigMap
	// kube-system/extension-apiserver-authentication, as upstream does.
	RequestHeader *RequestHeader
	// Dial, when set, is how the process connects to the kubelets: from
	// its pod on its node, whose network reaches the nodes' addresses
	// (the kubelets listen on their nodes' InternalIPs, which the machine
	// running this need not route). Nil dials directly.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	Log  logr.Logger
}

// Server is a running simulated metrics-server.
type Server struct {
	opts    Options
	client  kubernetes.Interface
	kubelet *http.Client
	store   store
	mux     *http.ServeMux
	tls     *tls.Config

	nodes                   listersv1.NodeLister
	pods                    listersv1.PodLister
	nodesSynced, podsSynced func() bool

	mu       sync.Mutex
	header   *RequestHeader
	lastTick time.Time
}

// New checks the options and makes the server; Run starts it.
func New(opts Options) (*Server, error) {
	if opts.API == nil {
		return nil, errors.New("metrics-server: no API server configuration (the pod's service account)")
	}
	if opts.KubeletInsecureTLS && len(opts.KubeletCA) > 0 {
		// The upstream flag validation's message.
		return nil, errors.New("cannot use both --kubelet-certificate-authority and --kubelet-insecure-tls")
	}
	if opts.MetricResolution == 0 {
		opts.MetricResolution = 60 * time.Second
	}
	if opts.AddressTypes == nil {
		opts.AddressTypes = DefaultAddressTypes
	}
	if opts.KubeletPort == 0 {
		opts.KubeletPort = 10250
	}
	client, err := kubernetes.NewForConfig(opts.API)
	if err != nil {
		return nil, fmt.Errorf("unable to construct lister client: %w", err)
	}
	kc := rest.CopyConfig(opts.API)
	switch {
	case opts.KubeletInsecureTLS:
		kc.Insecure, kc.CAData, kc.CAFile = true, nil, ""
	case len(opts.KubeletCA) > 0:
		kc.CAData, kc.CAFile = opts.KubeletCA, ""
	}
	kc.Dial = opts.Dial
	transport, err := rest.TransportFor(kc)
	if err != nil {
		return nil, fmt.Errorf("unable to construct transport: %w", err)
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts: opts, client: client,
		// --kubelet-request-timeout's default.
		kubelet: &http.Client{Transport: transport, Timeout: 10 * time.Second},
		store:   store{resolution: opts.MetricResolution},
		header:  opts.RequestHeader,
		// The aggregator's client certificate is checked by the handler
		// against the request-header CA, so any is requested here.
		tls: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12},
	}
	s.routes()
	return s, nil
}

// TLSConfig is the serving configuration: metrics-server's self-signed
// certificate (it makes one in --cert-dir when given none; the upstream
// APIService sets insecureSkipTLSVerify).
func (s *Server) TLSConfig() *tls.Config { return s.tls }

// Run lists nodes and running pods, then scrapes every resolution until
// ctx ends.
func (s *Server) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(s.client, 0)
	// Only running pods have metrics (pkg/server/informer.go).
	podFactory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "status.phase=Running"
	}))
	nodes, pods := factory.Core().V1().Nodes(), podFactory.Core().V1().Pods()
	s.mu.Lock()
	s.nodes, s.pods = nodes.Lister(), pods.Lister()
	s.nodesSynced, s.podsSynced = nodes.Informer().HasSynced, pods.Informer().HasSynced
	s.mu.Unlock()
	factory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	defer factory.Shutdown()
	defer podFactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced, pods.Informer().HasSynced) {
		return ctx.Err()
	}
	if s.header == nil {
		h, err := readRequestHeader(ctx, s.client)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.header = h
		s.mu.Unlock()
	}
	tick := time.NewTicker(s.opts.MetricResolution)
	defer tick.Stop()
	for {
		s.tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (s *Server) tick(ctx context.Context) {
	s.mu.Lock()
	s.lastTick = time.Now()
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.opts.MetricResolution)
	defer cancel()
	nodes, err := s.nodes.List(everything)
	if err != nil {
		s.opts.Log.Error(err, "Failed to list nodes")
	}
	s.store.put(s.scrape(ctx, nodes))
}

// ServeHTTP serves the metrics API and health checks.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	// The checks metrics-server registers (pkg/server/server.go
	// RegisterProbes, v0.8.0) besides the generic API server's ping.
	healthz.InstallReadyzHandler(s.mux, healthz.PingHealthz,
		healthz.NamedCheck("metric-storage-ready", func(*http.Request) error {
			if !s.store.ready() {
				return errors.New("no metrics to serve")
			}
			return nil
		}),
		healthz.NamedCheck("metric-informer-sync", func(*http.Request) error {
			s.mu.Lock()
			nodes, pods := s.nodesSynced, s.podsSynced
			s.mu.Unlock()
			if nodes == nil || !nodes() {
				return errors.New("cache for node informer has not synced")
			}
			if !pods() {
				return errors.New("cache for pod informer has not synced")
			}
			return nil
		}))
	healthz.InstallLivezHandler(s.mux, healthz.PingHealthz,
		healthz.NamedCheck("metric-collection-timely", func(*http.Request) error {
			s.mu.Lock()
			last := s.lastTick
			s.mu.Unlock()
			// Upstream allows a tick 1.5 resolutions before failing.
			if max := s.opts.MetricResolution * 3 / 2; !last.IsZero() && time.Since(last) > max {
				return fmt.Errorf("metric collection didn't finish on time")
			}
			return nil
		}))
	healthz.InstallHandler(s.mux, healthz.PingHealthz)
	api := http.NewServeMux()
	api.HandleFunc("GET /apis", s.serveGroups)
	api.HandleFunc("GET /apis/"+group, s.serveGroup)
	api.HandleFunc("GET /apis/"+groupVersion, s.serveResources)
	api.HandleFunc("GET /apis/"+groupVersion+"/nodes", s.listNodes)
	api.HandleFunc("GET /apis/"+groupVersion+"/nodes/{name}", s.getNode)
	api.HandleFunc("GET /apis/"+groupVersion+"/pods", s.listPods)
	api.HandleFunc("GET /apis/"+groupVersion+"/namespaces/{ns}/pods", s.listPods)
	api.HandleFunc("GET /apis/"+groupVersion+"/namespaces/{ns}/pods/{name}", s.getPod)
	s.mux.Handle("/", s.authorized(api))
}

// selfSigned is a serving certificate for localhost, as metrics-server
// makes when it has none (MaybeDefaultWithSelfSignedCerts("localhost",
// nil, 127.0.0.1)).
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "localhost@" + strconv.FormatInt(time.Now().Unix(), 10)},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
