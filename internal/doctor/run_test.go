package doctor

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// certificate makes a self-signed certificate valid from now for validity.
func certificate(t *testing.T, now time.Time, validity time.Duration) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes-admin"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// serveTLS serves a TLS handshake with cert, as an API server would.
func serveTLS(t *testing.T, cert tls.Certificate) string {
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	return "https://" + l.Addr().String()
}

func TestCertificates(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	// envtest's API server certificate is valid for a week, its client
	// certificate too: healthy when the warning window is a day.
	expect(t, "envtest", Certificates(ctx, env.Config, now, 24*time.Hour), 0, Warning)
	expect(t, "envtest two weeks ahead", Certificates(ctx, env.Config, now, 14*24*time.Hour), 2, Warning, "expires on")

	soon, _ := certificate(t, now, 10*24*time.Hour)
	_, expiredClient := certificate(t, now, -time.Hour)
	cfg := &rest.Config{Host: serveTLS(t, soon), TLSClientConfig: rest.TLSClientConfig{CertData: expiredClient}}
	fs := Certificates(ctx, cfg, now, 30*24*time.Hour)
	if len(fs) != 2 {
		t.Fatalf("want the serving and the client certificate: %+v", fs)
	}
	expect(t, "serving", fs[:1], 1, Warning, "serving certificate expires", "certificatesExpiryDays")
	expect(t, "client", fs[1:], 1, Error, "client certificate expired", "CN=kubernetes-admin", "kubeconfig")
}

func TestRunExitCode(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "run")
	ctx := context.Background()
	opts := Options{Workload: env.Client, WorkloadConfig: env.Config, Management: env.Client, Namespace: ns, CertWarning: time.Hour, Azure: true}
	c.linuxNode("lin-1")
	r, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode() != 0 || len(r.Findings) != 0 || len(r.Checks) != len(Checks)+2 {
		t.Fatalf("clean Linux cluster: exit %d, %d checks, findings %+v", r.ExitCode(), len(r.Checks), r.Findings)
	}
	c.create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, nil)
	r, _ = Run(ctx, opts)
	if r.ExitCode() != 1 || len(r.Findings) != 1 || r.Findings[0].Check != "services" {
		t.Fatalf("a Service without pods: exit %d, findings %+v", r.ExitCode(), r.Findings)
	}
	c.create(deployment(ns, "web", corev1.PodSpec{}), nil)
	c.windowsNode("win-1")
	r, _ = Run(ctx, opts)
	// The Windows node has no kube-proxy or CNI (errors), the Deployment
	// no OS (a warning), and the node's build is reported (information).
	if r.ExitCode() != 2 || r.Count(Error) != 2 || r.Count(Warning) < 1 || r.Count(Info) != 1 || r.Findings[0].Severity != Error {
		t.Fatalf("exit %d, findings %+v", r.ExitCode(), r.Findings)
	}
}
