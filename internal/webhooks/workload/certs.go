package workload

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"sigs.k8s.io/cluster-api/util/certs"
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

func loadPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, []byte, error) {
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

func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	// Cluster API's decoders answer (nil, nil) for bytes holding no PEM
	// block (an empty or truncated Secret or file): that is unreadable too.
	cert, err := certs.DecodeCertPEM(certPEM)
	if err == nil && cert == nil {
		err = errors.New("no PEM certificate")
	}
	if err != nil {
		return nil, nil, err
	}
	key, err := certs.DecodePrivateKeyPEM(keyPEM)
	if err == nil && key == nil {
		err = errors.New("no PEM private key")
	}
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// newCert makes a certificate (a CA when parent is nil) and writes it and
// its key, the key readable by the owner only.
func newCert(dir, certFile, keyFile string, parent *x509.Certificate, parentKey crypto.Signer, cn string, dnsNames []string, now time.Time, validity time.Duration) (*x509.Certificate, crypto.Signer, []byte, error) {
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

// makeCert makes a certificate, a CA when parent is nil, in memory. The
// libraries' CA and signing helpers read the clock and fix the validity
// (client-go's CA ten years, Cluster API's leaves one); rotation needs both
// from the caller, so the template is made here.
func makeCert(parent *x509.Certificate, parentKey crypto.Signer, cn string, dnsNames []string, now time.Time, validity time.Duration) (cert *x509.Certificate, key crypto.Signer, certPEM, keyPEM []byte, err error) {
	if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, key.Public(), signerKey)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("parsing a certificate just made: %w", err)
	}
	if keyPEM, err = certs.EncodePrivateKeyPEMFromSigner(key); err != nil {
		return nil, nil, nil, nil, err
	}
	return cert, key, certs.EncodeCertPEM(cert), keyPEM, nil
}
