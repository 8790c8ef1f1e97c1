package arm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// certAuthority is the emulator's own CA: the SDK clients trust it and
// nothing else, so TLS (which the SDK's bearer-token policy insists on) works
// without touching the machine's trust store.
type certAuthority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newCertAuthority() (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	// Valid from an hour back, for clients whose clock is a little behind.
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "winkube ARM emulator CA", NotBefore: time.Now().Add(-time.Hour)}, key)
	if err != nil {
		return nil, err
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key, certPEM: certPEM}, nil
}

// serverCert signs a serving certificate for host. client-go has no helper
// that signs with a CA of one's own (Cluster API's certs.Config does, but
// the emulator does not depend on Cluster API), hence the template.
func (ca *certAuthority) serverCert(host string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "winkube ARM emulator"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	} else if host != "" && ip == nil {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
