package workload

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the shared CA Secret. previous.crt is the CA before the last
// rotation, kept in the webhooks' caBundle until replicas serving with it
// have moved on.
const (
	caSecretCert     = "ca.crt"
	caSecretKey      = "ca.key"
	caSecretPrevious = "previous.crt"
)

// SharedCA is the CA every admission replica signs its serving certificate
// with, and the bundle the webhook configurations trust.
type SharedCA struct {
	Cert   *x509.Certificate
	Key    crypto.Signer
	Bundle []byte
}

// EnsureSharedCA reads the CA from the Secret key, creating it when absent
// and rotating it when it expires within renewBefore. Replicas race
// safely: a create that finds the Secret made by another replica, or an
// update that finds it changed, is tried again, and reads and uses the
// winner's CA instead.
func EnsureSharedCA(ctx context.Context, c client.Client, key client.ObjectKey, now time.Time, validity, renewBefore time.Duration) (*SharedCA, error) {
	var ca *SharedCA
	var err error
	// The attempt's own error is what counts: retry.OnError answers nil
	// when the error wraps a cancelled or expired context (it takes that
	// for its own interruption, wait.Interrupted), which left a nil CA
	// and a panic when the world stopped the server mid-read.
	_ = retry.OnError(retry.DefaultRetry, lostRace, func() error {
		ca, err = ensureSharedCA(ctx, c, key, now, validity, renewBefore)
		return err
	})
	if lostRace(err) {
		return nil, fmt.Errorf("the admission CA Secret %s keeps changing under this replica: check what else writes it", key)
	}
	return ca, err
}

// lostRace: another replica created or rotated the CA first.
func lostRace(err error) bool { return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) }

func ensureSharedCA(ctx context.Context, c client.Client, key client.ObjectKey, now time.Time, validity, renewBefore time.Duration) (*SharedCA, error) {
	s := &corev1.Secret{}
	err := c.Get(ctx, key, s)
	if apierrors.IsNotFound(err) {
		cert, caKey, certPEM, keyPEM, err := makeCert(nil, nil, "winkube admission CA", nil, now, validity)
		if err != nil {
			return nil, err
		}
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{caSecretCert: certPEM, caSecretKey: keyPEM}}
		if err := c.Create(ctx, s); err != nil {
			return nil, fmt.Errorf("creating the admission CA Secret %s: %w", key, err)
		}
		return &SharedCA{Cert: cert, Key: caKey, Bundle: certPEM}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the admission CA Secret %s: %w", key, err)
	}
	cert, caKey, perr := parsePair(s.Data[caSecretCert], s.Data[caSecretKey])
	if perr == nil && now.Add(renewBefore).Before(cert.NotAfter) {
		return &SharedCA{Cert: cert, Key: caKey, Bundle: bundle(s.Data[caSecretCert], s.Data[caSecretPrevious], now)}, nil
	}
	// Expiring, or unreadable: rotate, keeping the old CA trusted.
	newCert, newKey, certPEM, keyPEM, err := makeCert(nil, nil, "winkube admission CA", nil, now, validity)
	if err != nil {
		return nil, err
	}
	previous := []byte(nil)
	if perr == nil {
		previous = s.Data[caSecretCert]
	}
	s.Data = map[string][]byte{caSecretCert: certPEM, caSecretKey: keyPEM, caSecretPrevious: previous}
	if err := c.Update(ctx, s); err != nil {
		return nil, fmt.Errorf("rotating the admission CA in %s: %w", key, err)
	}
	return &SharedCA{Cert: newCert, Key: newKey, Bundle: bundle(certPEM, previous, now)}, nil
}

// bundle is the current CA, and the previous one while it is still valid.
func bundle(current, previous []byte, now time.Time) []byte {
	if old, err := certs.DecodeCertPEM(previous); err == nil && old != nil && now.Before(old.NotAfter) {
		return append(append([]byte{}, current...), previous...)
	}
	return current
}

// EnsureServingCert keeps dir holding a serving certificate for dnsNames
// signed by ca, valid at least renewBefore from now. It reports whether it
// wrote a new one (controller-runtime's webhook server reloads the files).
func EnsureServingCert(dir string, dnsNames []string, ca *SharedCA, now time.Time, validity, renewBefore time.Duration) (bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	leaf, _, _, err := loadPair(filepath.Join(dir, tlsCertFile), filepath.Join(dir, tlsKeyFile))
	if err == nil && now.Add(renewBefore).Before(leaf.NotAfter) && sameNames(leaf.DNSNames, dnsNames) && leaf.CheckSignatureFrom(ca.Cert) == nil {
		return false, nil
	}
	// A serving certificate outliving its CA would stop verifying first.
	if left := ca.Cert.NotAfter.Sub(now); left > 0 && validity > left {
		validity = left
	}
	_, _, _, err = newCert(dir, tlsCertFile, tlsKeyFile, ca.Cert, ca.Key, dnsNames[0], dnsNames, now, validity)
	return err == nil, err
}
