package workload

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// ServerOptions say how one admission server runs.
type ServerOptions struct {
	// Config reaches the workload cluster.
	Config *rest.Config
	// Host and Port the webhook server listens on; CertDir holds its
	// serving certificate, for DNSNames.
	Host     string
	Port     int
	CertDir  string
	DNSNames []string
	// ClientConfig is how the API server reaches this server (a Service, or
	// a URL), without caBundle: the server fills it in.
	ClientConfig admissionregistrationv1.WebhookClientConfig
	// CASecret, when its Name is set, is the Secret of the CA every replica
	// shares; otherwise the server keeps a CA of its own in CertDir.
	CASecret client.ObjectKey
	// Install creates the webhook configurations and keeps their caBundle.
	Install bool
	// Resolver reads image platforms; FailClosed refuses pods whose images
	// cannot be read; WindowsTaint adds the os=windows toleration.
	Resolver     *Resolver
	FailClosed   bool
	WindowsTaint bool
	MetricsAddr  string
	// EnableHTTP2 lets the webhook and metrics servers speak HTTP/2; they
	// speak only HTTP/1.1 otherwise (see TLSOptions).
	EnableHTTP2 bool
	Logger      logr.Logger
	// Resync is how often the certificates and the configurations are
	// checked; a minute when zero.
	Resync time.Duration
}

// Certificate lifetimes: a year, renewed a month before expiry; the shared
// CA lives twice as long.
const serverValidity, serverRenew = 365 * 24 * time.Hour, 30 * 24 * time.Hour

// Serve runs an admission server until ctx ends: the webhooks, the reporter
// of pods waiting for a missing Windows build, and the certificates.
func Serve(ctx context.Context, o ServerOptions) error {
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.Resync == 0 {
		o.Resync = time.Minute
	}
	c, err := client.New(o.Config, client.Options{})
	if err != nil {
		return err
	}
	certs := &serverCerts{c: c, o: &o}
	caPEM, err := certs.ensure(ctx)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	mgr, err := ctrl.NewManager(o.Config, ctrl.Options{
		Logger: o.Logger,
		// The build reporter reads back only its own Events, by name: a
		// cached read would list and watch every Event of the cluster,
		// which its role (flavors.AdmissionObjects) does not grant, and
		// would wait for ever for a cache that never syncs.
		Client:        client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Event{}}}},
		Metrics:       metricsserver.Options{BindAddress: o.MetricsAddr, TLSOpts: TLSOptions(o.EnableHTTP2)},
		WebhookServer: webhook.NewServer(webhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir, TLSOpts: TLSOptions(o.EnableHTTP2)}),
	})
	if err != nil {
		return err
	}
	if o.Resolver == nil {
		o.Resolver = NewResolver()
	}
	a := New(o.Resolver, mgr.GetAPIReader())
	a.FailClosed, a.WindowsTaint = o.FailClosed, o.WindowsTaint
	s := mgr.GetWebhookServer()
	s.Register(MutatePath, &webhook.Admission{Handler: a.Mutate()})
	s.Register(ValidatePath, &webhook.Admission{Handler: a.Validate()})
	s.Register(ServicesPath, &webhook.Admission{Handler: a.Services()})
	if err := (&BuildReporter{Client: mgr.GetClient(), Resolver: o.Resolver}).SetupWithManager(mgr); err != nil {
		return err
	}
	if o.Install {
		if err := install(ctx, c, o.ClientConfig, caPEM); err != nil {
			return fmt.Errorf("installing the webhook configurations: %w", err)
		}
	}
	// Rotate before expiry (the webhook server reloads the files itself),
	// and put this server's client configuration and CA back when
	// something rewrote the configurations, as a ClusterResourceSet
	// re-applying them does.
	go func() {
		t := time.NewTicker(o.Resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				ca, err := certs.ensure(ctx)
				if err == nil && o.Install && !installed(ctx, c, o.ClientConfig, ca) {
					err = install(ctx, c, o.ClientConfig, ca)
				}
				if err != nil {
					o.Logger.Error(err, "admission certificates")
				}
			}
		}
	}()
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// install creates the webhook configurations, or updates them to this
// server's client configuration and CA.
func install(ctx context.Context, c client.Client, cc admissionregistrationv1.WebhookClientConfig, ca []byte) error {
	cc.CABundle = ca
	m, v := Configurations(cc)
	// Read first, then update: in a workload cluster the add-on's
	// ClusterResourceSet creates both configurations, and the server's
	// ServiceAccount may get and update those two by name and create
	// none (RBAC cannot limit create by name). Only where nothing made
	// them (a cluster without the add-on) does the server create them,
	// with whatever rights its credential has there.
	// Replicas install at the same time: one that loses the race to
	// create or update reads again and puts its own CA over the winner's
	// (both are the shared CA).
	raced := func(err error) bool { return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) }
	for _, obj := range []client.Object{m, v} {
		// The last attempt's error, not OnError's answer, which is nil
		// for an error wrapping a cancelled context (see EnsureSharedCA).
		var err error
		_ = retry.OnError(retry.DefaultBackoff, raced, func() error {
			cur := obj.DeepCopyObject().(client.Object)
			err = c.Get(ctx, client.ObjectKeyFromObject(obj), cur)
			switch {
			case err == nil:
				obj.SetResourceVersion(cur.GetResourceVersion())
				err = c.Update(ctx, obj)
			case apierrors.IsNotFound(err):
				obj.SetResourceVersion("")
				if err = c.Create(ctx, obj); apierrors.IsForbidden(err) {
					err = fmt.Errorf("webhook configuration %s does not exist and this server may not create it: the admission add-on's ClusterResourceSet creates it: %w", obj.GetName(), err)
				}
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// serverCerts keeps the serving certificate and returns the CA bundle the
// webhook configurations must carry.
type serverCerts struct {
	c client.Client
	o *ServerOptions
}

func (s *serverCerts) ensure(ctx context.Context) ([]byte, error) {
	now := time.Now()
	if s.o.CASecret.Name == "" {
		ca, _, err := EnsureCerts(s.o.CertDir, s.o.DNSNames, now, serverValidity, serverRenew)
		return ca, err
	}
	ca, err := EnsureSharedCA(ctx, s.c, s.o.CASecret, now, 2*serverValidity, serverRenew)
	if err != nil {
		return nil, err
	}
	if _, err := EnsureServingCert(s.o.CertDir, s.o.DNSNames, ca, now, serverValidity, serverRenew); err != nil {
		return nil, err
	}
	return ca.Bundle, nil
}

// installed reports whether every webhook of both configurations reaches
// this server (cc, its path aside) and trusts ca.
func installed(ctx context.Context, c client.Client, cc admissionregistrationv1.WebhookClientConfig, ca []byte) bool {
	m, v := Configurations(admissionregistrationv1.WebhookClientConfig{})
	if c.Get(ctx, client.ObjectKeyFromObject(m), m) != nil || c.Get(ctx, client.ObjectKeyFromObject(v), v) != nil {
		return false
	}
	var got []admissionregistrationv1.WebhookClientConfig
	for _, w := range m.Webhooks {
		got = append(got, w.ClientConfig)
	}
	for _, w := range v.Webhooks {
		got = append(got, w.ClientConfig)
	}
	for _, g := range got {
		if !bytes.Equal(g.CABundle, ca) || (g.URL == nil) != (cc.URL == nil) || (g.Service == nil) != (cc.Service == nil) {
			return false
		}
		if cc.URL != nil && !strings.HasPrefix(*g.URL, *cc.URL+"/") {
			return false
		}
		if cc.Service != nil && (g.Service.Name != cc.Service.Name || g.Service.Namespace != cc.Service.Namespace) {
			return false
		}
	}
	return true
}

// TLSOptions are the servers' TLS settings: HTTP/1.1 only unless
// enableHTTP2. HTTP/2's stream reset lets one client make a server start
// work without bound (Rapid Reset, CVE-2023-44487, GHSA-qppj-fm5r-hxr3),
// which is why kubebuilder's scaffold turns HTTP/2 off behind an
// --enable-http2 flag (kubernetes-sigs/kubebuilder
// testdata/project-v4/cmd/main.go at c074cfe064bc6902379b5cb9ec14a5a46c9aa427):
// the servers offer only http/1.1 in ALPN.
func TLSOptions(enableHTTP2 bool) []func(*tls.Config) {
	if enableHTTP2 {
		return nil
	}
	return []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
}
