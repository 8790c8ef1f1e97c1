package nodejoin

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// A bootstrap token as `kubeadm token create` makes one, for the facts of
// kubernetes/kubernetes cmd/kubeadm/app/phases/bootstraptoken/node/token.go
// (04791b4906602ffda5ccf9bc4c84d3329f1d7080: one Secret per token, refused
// when the ID exists) and cmd/kubeadm/app/constants/constants.go
// (DefaultTokenDuration 24h, the default-node-token group):
// the format and the Secret's keys come from k8s.io/cluster-bootstrap, the
// library kubeadm itself uses.
const (
	// DefaultTokenTTL is kubeadm's default token lifetime.
	DefaultTokenTTL = 24 * time.Hour
	// NodeTokenGroup is the extra group kubeadm's node tokens carry; the
	// kubeadm:kubelet-bootstrap and kubeadm:node-autoapprove-bootstrap
	// bindings that `kubeadm init` creates name it.
	NodeTokenGroup = "system:bootstrappers:kubeadm:default-node-token"
	// tokenDescription marks the tokens winkube made, so `node leave` and
	// a user reading kube-system can tell them apart.
	tokenDescription = "winkube node join"
)

// Token is a bootstrap token in the cluster.
type Token struct {
	ID, Secret string
	Expires    time.Time
}

// String is the "id.secret" form kubeadm join takes.
func (t Token) String() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

// TokenSecret is the kube-system Secret kubeadm stores token t in: usable
// for authentication and for signing cluster-info, with the node group.
func TokenSecret(t Token, description string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(t.ID)},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               t.ID,
			bootstrapapi.BootstrapTokenSecretKey:           t.Secret,
			bootstrapapi.BootstrapTokenExpirationKey:       t.Expires.UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      NodeTokenGroup,
			bootstrapapi.BootstrapTokenDescriptionKey:      description,
		},
	}
}

// CreateToken makes a new bootstrap token that expires ttl after now. A
// token ID that exists already is refused as kubeadm refuses it, and a new
// one is drawn (36^6 IDs: a clash is rare, two in a row rarer still).
func CreateToken(ctx context.Context, cs kubernetes.Interface, ttl time.Duration, now time.Time, node string) (Token, error) {
	if ttl <= 0 {
		return Token{}, fmt.Errorf("token TTL %s: a bootstrap token must expire after it is made (kubeadm's default is %s)", ttl, DefaultTokenTTL)
	}
	var lastErr error
	for range 3 {
		raw, err := bootstraputil.GenerateBootstrapToken()
		if err != nil {
			return Token{}, fmt.Errorf("generating a bootstrap token: %w", err)
		}
		id, secret, _ := strings.Cut(raw, ".")
		t := Token{ID: id, Secret: secret, Expires: now.Add(ttl).Truncate(time.Second)}
		_, err = cs.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, TokenSecret(t, tokenDescription+" "+node), metav1.CreateOptions{})
		if err == nil {
			return t, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return Token{}, fmt.Errorf("creating bootstrap token Secret kube-system/%s (the kubeconfig's user needs create on secrets in kube-system, as kubeadm token create does): %w", bootstraputil.BootstrapTokenSecretName(id), err)
		}
		lastErr = err
	}
	return Token{}, fmt.Errorf("a token with the drawn ID already exists, three times: %w", lastErr)
}

// CAHash is kubeadm's --discovery-token-ca-cert-hash of the first
// certificate in caPEM: "sha256:" and the hex SHA-256 of its DER
// SubjectPublicKeyInfo (kubernetes/kubernetes
// cmd/kubeadm/app/util/pubkeypin/pubkeypin.go, dcece7a83991b752fe4306ec724a8ad4c6b3815d).
func CAHash(caPEM []byte) (string, error) {
	var block *pem.Block
	for rest := caPEM; ; {
		if block, rest = pem.Decode(rest); block == nil || block.Type == "CERTIFICATE" {
			break
		}
	}
	if block == nil {
		return "", errors.New("the cluster's CA data holds no PEM certificate: check kube-public/cluster-info's kubeconfig")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("parsing the cluster's CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
