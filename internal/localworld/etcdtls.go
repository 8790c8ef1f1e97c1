package localworld

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
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// etcdPKIDir holds, in the state directory, the management etcd's CA and
// the certificates it signs.
const etcdPKIDir = "management-pki"

// etcdPKI are the files of the management etcd's certificates: the CA
// (kept across starts), etcd's serving and peer certificate, and the
// client certificate of the API server (and of the world, for tests and
// diagnosis).
type etcdPKI struct {
	CA, CAKey, Server, ServerKey, Client, ClientKey string
}

// ensureEtcdPKI loads the world's etcd CA from dir, or makes one, and
// signs a fresh serving and client certificate with it. Keys are 0600 and
// the folder 0700: another user of the machine can neither read them nor
// list them.
func ensureEtcdPKI(dir string) (etcdPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return etcdPKI{}, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return etcdPKI{}, err
	}
	p := etcdPKI{
		CA: filepath.Join(dir, "etcd-ca.crt"), CAKey: filepath.Join(dir, "etcd-ca.key"),
		Server: filepath.Join(dir, "etcd-server.crt"), ServerKey: filepath.Join(dir, "etcd-server.key"),
		Client: filepath.Join(dir, "apiserver-etcd-client.crt"), ClientKey: filepath.Join(dir, "apiserver-etcd-client.key"),
	}
	ca, caKey, err := loadCA(p.CA, p.CAKey)
	if errors.Is(err, os.ErrNotExist) {
		ca, caKey, err = newCA(p.CA, p.CAKey)
	}
	if err != nil {
		return etcdPKI{}, fmt.Errorf("the management etcd's CA in %s: %w", dir, err)
	}
	// Serving and client certificates are made again at every start, so
	// that none outlives its year however long the world lives.
	if err := signLeaf(ca, caKey, p.Server, p.ServerKey, pkix.Name{CommonName: "management-etcd"},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return etcdPKI{}, err
	}
	if err := signLeaf(ca, caKey, p.Client, p.ClientKey, pkix.Name{CommonName: "kube-apiserver-etcd-client"},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil); err != nil {
		return etcdPKI{}, err
	}
	return p, nil
}

func loadCA(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kblock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func newCA(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "winkube-management-etcd-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePair(certFile, keyFile, der, key); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func signLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string, subject pkix.Name, usages []x509.ExtKeyUsage, ips []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: subject, NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages, IPAddresses: ips}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writePair(certFile, keyFile, der, key)
}

func writePair(certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// secureEtcd makes the management etcd serve its clients and peers over
// TLS with client-certificate authentication (the flags kubeadm gives a
// control plane's etcd), and the API server reach it with its client
// certificate: another user of the machine reaches etcd's loopback ports,
// and etcd holds every management Secret in the clear.
//
// envtest health-checks etcd at its URL with a client that has no
// certificate, so the URL is etcd's metrics listener, which serves only
// /health and /metrics over plain HTTP; the clients' listener is another
// port.
func secureEtcd(etcd *envtest.Etcd, api *envtest.APIServer, p etcdPKI) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	host := "127.0.0.1"
	clients := "https://" + net.JoinHostPort(host, strconv.Itoa(ports[0]))
	peers := "https://" + net.JoinHostPort(host, strconv.Itoa(ports[1]))
	etcd.URL = &url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(ports[2]))}
	e := etcd.Configure()
	e.Set("listen-client-urls", clients)
	e.Set("advertise-client-urls", clients)
	e.Set("listen-metrics-urls", etcd.URL.String())
	e.Set("client-cert-auth", "true")
	e.Set("trusted-ca-file", p.CA)
	e.Set("cert-file", p.Server)
	e.Set("key-file", p.ServerKey)
	e.Set("listen-peer-urls", peers)
	e.Set("peer-client-cert-auth", "true")
	e.Set("peer-trusted-ca-file", p.CA)
	e.Set("peer-cert-file", p.Server)
	e.Set("peer-key-file", p.ServerKey)
	a := api.Configure()
	a.Set("etcd-servers", clients)
	a.Set("etcd-cafile", p.CA)
	a.Set("etcd-certfile", p.Client)
	a.Set("etcd-keyfile", p.ClientKey)
	return nil
}

// freePorts are n loopback ports free now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
