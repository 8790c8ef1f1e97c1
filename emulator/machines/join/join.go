// Package join does what `kubeadm join` and the kubelet's TLS bootstrap do
// for a worker: discover the cluster with a bootstrap token and the CA
// public-key hashes, then request a client certificate for the node with a
// CSR that the controller-manager approves and signs.
package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/cluster-bootstrap/token/jws"
)

// unsignedError: cluster-info has no signature for the token (yet).
type unsignedError struct{ id string }

func (e unsignedError) Error() string {
	return fmt.Sprintf("could not find a JWS signature in the cluster-info ConfigMap for token ID %q", e.id)
}

// Discovery's errors are kubeadm's (cmd/kubeadm/app/discovery/token/token.go,
// kubernetes/kubernetes@038dec7f4875884f8622c07b0a7caa941d19f2d8, and
// cmd/kubeadm/app/util/pubkeypin/pubkeypin.go): a token the cluster does
// not know, or whose signature was removed when it expired, is waited for
// until the discovery timeout, then reported as the last error.

// Discovery is what a joining node needs to find the cluster.
type Discovery struct {
	// Endpoint is host:port of the API server (the control-plane endpoint).
	Endpoint string
	// Token is "id.secret".
	Token string
	// CACertHashes are "sha256:<hex>" pins of the cluster CA's public key.
	CACertHashes             []string
	UnsafeSkipCAVerification bool
}

// Cluster is a discovered cluster: where it is and its CA.
type Cluster struct {
	Server string
	CAData []byte
}

// Discover reads the kube-public/cluster-info ConfigMap, checks its JWS
// signature with the token and pins the CA by its public-key hash, as
// kubeadm's token discovery does. It retries until ctx ends, since workers
// often boot before the control plane answers.
func Discover(ctx context.Context, d Discovery) (*Cluster, error) {
	id, secret, ok := strings.Cut(d.Token, ".")
	if !ok {
		return nil, fmt.Errorf("bootstrap token %q is not of the form id.secret", redact(d.Token))
	}
	if len(d.CACertHashes) == 0 && !d.UnsafeSkipCAVerification {
		return nil, fmt.Errorf("discovery has no caCertHashes and does not set unsafeSkipCAVerification: kubeadm refuses to trust an unpinned CA")
	}
	// One request a second, as kubeadm's discovery retries: no client
	// rate limiter, whose refusals near the deadline would hide the last
	// real answer.
	insecure := &rest.Config{Host: "https://" + d.Endpoint, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: 10 * time.Second, QPS: -1}
	var found *Cluster
	var last error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := kubernetes.NewForConfig(insecure)
		if err != nil {
			return false, err
		}
		cm, err := c.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			// kubeadm's request does not share the poll's deadline, so its
			// last error is a real answer, not the deadline cutting it.
			if ctx.Err() == nil || last == nil {
				last = fmt.Errorf("failed to request the cluster-info ConfigMap: %w", err)
			}
			return false, nil
		}
		cl, err := verify(cm, id, secret, d)
		if errors.As(err, new(unsignedError)) {
			// The controller-manager's bootstrap signer signs new tokens
			// shortly: keep trying until the deadline.
			last = err
			return false, nil
		}
		if err != nil {
			return false, err // a wrong secret or CA pin does not heal
		}
		found = cl
		return true, nil
	})
	if err != nil {
		if last != nil && ctx.Err() != nil {
			return nil, last
		}
		return nil, err
	}
	return found, nil
}

func verify(cm *corev1.ConfigMap, id, secret string, d Discovery) (*Cluster, error) {
	kc, ok := cm.Data["kubeconfig"]
	if !ok {
		return nil, fmt.Errorf("cluster-info has no kubeconfig")
	}
	sig, ok := cm.Data["jws-kubeconfig-"+id]
	if !ok {
		return nil, unsignedError{id}
	}
	if !jws.DetachedTokenIsValid(sig, kc, id, secret) {
		return nil, errors.New("failed to verify JWS signature of received cluster info object, can't trust this API Server")
	}
	cfg, err := clientcmd.Load([]byte(kc))
	if err != nil {
		return nil, fmt.Errorf("cluster-info kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		if !d.UnsafeSkipCAVerification {
			if err := pinned(c.CertificateAuthorityData, d.CACertHashes); err != nil {
				return nil, err
			}
		}
		return &Cluster{Server: c.Server, CAData: c.CertificateAuthorityData}, nil
	}
	return nil, fmt.Errorf("cluster-info kubeconfig names no cluster")
}

// pinned checks that some certificate in caPEM has a public key whose
// SHA-256 is one of the pins.
func pinned(caPEM []byte, pins []string) error {
	certs, err := certutil.ParseCertsPEM(caPEM)
	if err != nil {
		return fmt.Errorf("cluster CA: %w", err)
	}
	var got []string
	for _, cert := range certs {
		h := PublicKeyHash(cert)
		for _, p := range pins {
			if strings.EqualFold(p, h) {
				return nil
			}
		}
		got = append(got, h)
	}
	return fmt.Errorf("cluster CA found in cluster-info ConfigMap is invalid: none of the public keys %q are pinned", strings.Join(got, ":"))
}

// PublicKeyHash is kubeadm's pin of a CA: sha256 of its SubjectPublicKeyInfo.
func PublicKeyHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Credentials are the node's client certificate and key (PEM).
type Credentials struct {
	CertPEM, KeyPEM []byte
}

// Bootstrap requests the node's client certificate with the bootstrap
// token, as the kubelet's TLS bootstrap does, and waits until it is
// approved and signed. It refuses to take over the name of a Ready node,
// as kubeadm join does.
func Bootstrap(ctx context.Context, cl *Cluster, token, nodeName string) (*Credentials, error) {
	bc := &rest.Config{Host: cl.Server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cl.CAData}, Timeout: 30 * time.Second}
	client, err := kubernetes.NewForConfig(bc)
	if err != nil {
		return nil, err
	}
	if n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err == nil {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil, fmt.Errorf("a Node with name %q and status \"Ready\" already exists in the cluster; delete it before joining a machine of that name", nodeName)
			}
		}
	} else if apierrors.IsUnauthorized(err) {
		return nil, fmt.Errorf("the bootstrap token is not accepted by the API server: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	reqPEM, err := certutil.MakeCSR(key, &pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}, nil, nil)
	if err != nil {
		return nil, err
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	name, uid, err := csr.RequestCertificateWithContext(ctx, client, reqPEM, "", certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return nil, fmt.Errorf("creating the node's certificate signing request: %w", err)
	}
	certPEM, err := csr.WaitForCertificate(ctx, client, name, uid)
	if err != nil {
		return nil, fmt.Errorf("certificate signing request %s was not approved and signed (is the controller-manager's csrapproving controller running, and the kubeadm:node-autoapprove-bootstrap binding present?): %w", name, err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, err
	}
	return &Credentials{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Config is a client configuration for the node's credentials.
func (c *Credentials) Config(cl *Cluster) *rest.Config {
	return &rest.Config{Host: cl.Server, TLSClientConfig: rest.TLSClientConfig{CAData: cl.CAData, CertData: c.CertPEM, KeyData: c.KeyPEM}, QPS: 20, Burst: 40}
}

func redact(t string) string {
	if id, _, ok := strings.Cut(t, "."); ok {
		return id + ".<redacted>"
	}
	return "<redacted>"
}

// WriteKubeconfig saves the node's credentials where the kubelet keeps
// them, so that the machine can boot again without joining again.
func (c *Credentials) WriteKubeconfig(path string, cl *Cluster, nodeName string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: cl.Server, CertificateAuthorityData: cl.CAData}
	cfg.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertPEM, ClientKeyData: c.KeyPEM}
	cfg.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	cfg.CurrentContext = "default-context"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// LoadKubeconfig reads credentials WriteKubeconfig saved.
func LoadKubeconfig(path string) (*rest.Config, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 20, 40
	return cfg, nil
}
