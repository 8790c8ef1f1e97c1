package workload

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// Cert files in the certificate folder; controller-runtime's webhook server
// reads tls.crt and tls.key and reloads them when they change.
const (
	caCertFile  = "ca.crt"
	caKeyFile   = "ca.key"
	tlsCertFile = "tls.crt"
	tlsKeyFile  = "tls.key"
)

// EnsureCerts keeps dir holding a serving certificate for dnsNames, signed
// by a CA of winkube's own, valid at least renewBefore from now. It creates
// or rotates what is missing, expiring or for other names (the CA too, when
// it expires), and returns the CA certificate for the webhooks' caBundle and
// whether anything changed.
func EnsureCerts(dir string, dnsNames []string, now time.Time, validity, renewBefore time.Duration) (caPEM []byte, rotated bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	ca, caKey, caPEM, err := loadPair(filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile))
	if err != nil || now.Add(renewBefore).After(ca.NotAfter) {
		if ca, caKey, caPEM, err = newCert(dir, caCertFile, caKeyFile, nil, nil, "winkube admission CA", nil, now, 2*validity); err != nil {
			return nil, false, err
		}
		rotated = true
	}
	leaf, _, _, err := loadPair(filepath.Join(dir, tlsCertFile), filepath.Join(dir, tlsKeyFile))
	if rotated || err != nil || now.Add(renewBefore).After(leaf.NotAfter) || !sameNames(leaf.DNSNames, dnsNames) || leaf.CheckSignatureFrom(ca) != nil {
		if _, _, _, err := newCert(dir, tlsCertFile, tlsKeyFile, ca, caKey, dnsNames[0], dnsNames, now, validity); err != nil {
			return nil, false, err
		}
		rotated = true
	}
	return caPEM, rotated, nil
}

func sameNames(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, key, err := parsePair(certPEM, keyPEM)
	return cert, key, certPEM, err
}

func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// newCert makes a certificate (a CA when parent is nil) and writes it and
// its key, the key readable by the owner only.
func newCert(dir, certFile, keyFile string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, dnsNames []string, now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	cert, key, certPEM, keyPEM, err := makeCert(parent, parentKey, cn, dnsNames, now, validity)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, keyFile), keyPEM, 0o600); err != nil {
		return nil, nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, certFile), certPEM, 0o644); err != nil {
		return nil, nil, nil, err
	}
	return cert, key, certPEM, nil
}

// makeCert makes a certificate, a CA when parent is nil, in memory.
func makeCert(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, dnsNames []string, now time.Time, validity time.Duration) (cert *x509.Certificate, key *ecdsa.PrivateKey, certPEM, keyPEM []byte, err error) {
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, DNSNames: dnsNames,
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("parsing a certificate just made: %w", err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
