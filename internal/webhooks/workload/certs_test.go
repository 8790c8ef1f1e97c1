package workload_test

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/webhooks/workload"
)

func TestCertificatesAreMadeKeptAndRotated(t *testing.T) {
	dir := t.TempDir()
	names := []string{"winkube-admission.winkube-system.svc"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	year, month := 365*24*time.Hour, 30*24*time.Hour
	ca1, rotated, err := workload.EnsureCerts(dir, names, now, year, month)
	if err != nil || !rotated {
		t.Fatalf("first run: %v rotated=%v", err, rotated)
	}
	leaf := func() *x509.Certificate { return readCert(t, filepath.Join(dir, "tls.crt")) }
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca1)
	if _, err := leaf().Verify(x509.VerifyOptions{Roots: pool, DNSName: names[0], CurrentTime: now}); err != nil {
		t.Fatalf("the serving certificate does not verify against the CA: %v", err)
	}
	if info, _ := os.Stat(filepath.Join(dir, "tls.key")); info.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", info.Mode().Perm())
	}
	// Half a year on: nothing to do.
	ca2, rotated, err := workload.EnsureCerts(dir, names, now.Add(180*24*time.Hour), year, month)
	if err != nil || rotated || !bytes.Equal(ca1, ca2) {
		t.Fatalf("mid-life run rotated=%v err=%v", rotated, err)
	}
	// Within a month of expiry: the leaf is renewed, the CA (valid two years) kept.
	before := leaf().NotAfter
	ca3, rotated, err := workload.EnsureCerts(dir, names, now.Add(year-10*24*time.Hour), year, month)
	if err != nil || !rotated || !bytes.Equal(ca1, ca3) || !leaf().NotAfter.After(before) {
		t.Fatalf("renewal: rotated=%v err=%v same CA=%v", rotated, err, bytes.Equal(ca1, ca3))
	}
	// New names: a new leaf.
	if _, rotated, _ := workload.EnsureCerts(dir, append(names, "admission.example"), now.Add(year-10*24*time.Hour), year, month); !rotated {
		t.Fatal("a change of names did not make a new certificate")
	}
	// The CA itself near its end: everything anew.
	ca4, rotated, err := workload.EnsureCerts(dir, names, now.Add(2*year-10*24*time.Hour), year, month)
	if err != nil || !rotated || bytes.Equal(ca1, ca4) {
		t.Fatalf("CA rotation: rotated=%v err=%v", rotated, err)
	}
}
