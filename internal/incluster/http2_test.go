package incluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/poll"
)

// selfSigned writes tls.crt and tls.key for 127.0.0.1 into a folder and
// returns it with a pool trusting the certificate.
func selfSigned(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return dir, pool
}

// protoOf starts the manager's webhook server as the options build it and
// returns the protocol an HTTP/2-capable client gets from it.
func protoOf(t *testing.T, o *managerOptions) string {
	t.Helper()
	dir, pool := selfSigned(t)
	o.webhookPort, o.webhookCertDir = freePort(t), dir
	srv := o.managerOptions().WebhookServer
	srv.Register("/ping", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("pong")) }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	var proto string
	poll.Until(t, 30*time.Second, func() string {
		resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/ping", o.webhookPort))
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		proto = resp.Proto
		return ""
	})
	return proto
}

// TestWebhookServerSpeaksOnlyHTTP1: an HTTP/2 client gets HTTP/1.1 from
// the manager's webhook server unless --enable-http2 (Rapid Reset,
// CVE-2023-44487); the metrics are served on loopback by default.
func TestWebhookServerSpeaksOnlyHTTP1(t *testing.T) {
	cmd := NewManagerCommand()
	if d := cmd.Flags().Lookup("enable-http2").DefValue; d != "false" {
		t.Errorf("--enable-http2 defaults to %s", d)
	}
	if got := protoOf(t, &managerOptions{}); got != "HTTP/1.1" {
		t.Errorf("an HTTP/2 client got %s from the webhook server, want HTTP/1.1", got)
	}
	if got := protoOf(t, &managerOptions{enableHTTP2: true}); got != "HTTP/2.0" {
		t.Errorf("with --enable-http2 an HTTP/2 client got %s, want HTTP/2.0", got)
	}
	for name, c := range map[string]string{"manager": cmd.Flags().Lookup("metrics-bind-address").DefValue, "admission": NewAdmissionCommand().Flags().Lookup("metrics-bind-address").DefValue} {
		if c == "0" {
			continue
		}
		host, _, err := net.SplitHostPort(c)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("the %s's metrics (plain HTTP, no authentication) are served on %q by default, want a loopback address", name, c)
		}
	}
}
