package kubelet_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/winkube/winkube/emulator/machines/kubelet"
)

// TestKubeletAPIAuthorizationIsKept: the kubelet's webhook authorizer
// keeps the API server's answer to a SubjectAccessReview (five minutes
// for an allowed request, thirty seconds for a refused one, the
// KubeletConfiguration defaults), so a client scraping the kubelet API
// costs the API server one review, not one per request; another user's
// request is still reviewed on its own, and refused.
func TestKubeletAPIAuthorizationIsKept(t *testing.T) {
	env := startAPIServer(t)
	ctx := context.Background()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-cluster-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	clientCert := func(serial int64, user string, groups ...string) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: user, Organization: groups},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)

	c := &requests{n: map[string]int{}}
	cfg := nodeConfig("authz-node", counted(env.Config, c), hostAddresses(t)())
	cfg.Log, cfg.ClientCA = logr.Discard(), pool
	k, err := kubelet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	base := "https://" + net.JoinHostPort(cfg.Address.String(), strconv.Itoa(kubelet.Port))
	get := func(cert tls.Certificate) int {
		t.Helper()
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}}} //nolint:gosec // the kubelet's self-signed certificate
		resp, err := hc.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	admin := clientCert(2, "scraper", "system:masters")
	reviews := c.get("POST subjectaccessreviews")
	for range 10 {
		if code := get(admin); code != http.StatusOK {
			t.Fatalf("system:masters' request answered %d, want 200", code)
		}
	}
	if n := c.get("POST subjectaccessreviews") - reviews; n != 1 {
		t.Errorf("10 requests of one user cost %d SubjectAccessReviews, want 1 (the authorizer keeps an allowed answer 5 minutes)", n)
	}
	if code := get(clientCert(3, "someone-else")); code != http.StatusForbidden {
		t.Errorf("a user without rights answered %d after an allowed user's requests, want 403", code)
	}
	if n := c.get("POST subjectaccessreviews") - reviews; n != 2 {
		t.Errorf("another user's request was not reviewed on its own: %d reviews in all, want 2", n)
	}
}
