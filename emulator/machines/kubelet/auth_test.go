package kubelet

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
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// foreignClientCert is a client certificate naming the API server's
// kubelet client and system:masters, signed by a CA another local user
// made: what the kubelet must not trust.
func foreignClientCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "attacker-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// kubeletAPIRefusesOtherUsers acts as another user of the machine, who
// reaches the node's kubelet port on loopback: without credentials, with
// a certificate of its own CA, with a made-up token, or with a real
// ServiceAccount token that has no nodes/proxy, it can neither exec into
// a pod that holds a Secret nor read its logs nor port-forward; the
// administrator, through the API server (kubectl exec), still can.
func kubeletAPIRefusesOtherUsers(t *testing.T, n *servingNode) {
	ctx := context.Background()
	if _, err := n.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vault"}, StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vault"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "docker.io/library/busybox:1.36",
		Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "vault"}, Key: "password"}}}}}}}})
	if _, err := n.client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := n.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "tenant", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + net.JoinHostPort(n.addr.String(), strconv.Itoa(Port))
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		token  string
		status int
	}{
		{"anonymous", nil, "", http.StatusUnauthorized},
		{"a certificate of another CA", ptrTo(foreignClientCert(t)), "", http.StatusUnauthorized},
		{"a made-up token", nil, "not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without nodes/proxy", nil, tr.Status.Token, http.StatusForbidden},
	} {
		cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the attacker does not care who the kubelet is
		if tc.cert != nil {
			cfg.Certificates = []tls.Certificate{*tc.cert}
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		for _, req := range []struct{ method, path string }{
			{http.MethodPost, "/exec/default/vault/a?command=printenv&command=PASSWORD&output=1"},
			{http.MethodGet, "/containerLogs/default/vault/a"},
			{http.MethodPost, "/portForward/default/vault"},
			{http.MethodGet, "/stats/summary"},
		} {
			r, _ := http.NewRequest(req.method, base+req.path, nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := c.Do(r)
			if err != nil {
				t.Fatalf("%s: %s %s: %v", tc.name, req.method, req.path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || strings.Contains(string(b), "s3cret") {
				t.Errorf("%s: %s %s answered %d %q, want %d", tc.name, req.method, req.path, resp.StatusCode, b, tc.status)
			}
		}
	}
	// kubectl exec and logs, through the API server and its kubelet
	// client certificate, still work.
	if out, _, err := execIn(t, n, "default", "vault", "a", []string{"printenv", "PASSWORD"}, ""); err != nil || out != "s3cret\n" {
		t.Fatalf("exec through the API server: %v %q", err, out)
	}
	if _, err := n.client.CoreV1().Pods("default").GetLogs("vault", &corev1.PodLogOptions{Container: "a"}).DoRaw(ctx); err != nil {
		t.Fatalf("logs through the API server: %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }
