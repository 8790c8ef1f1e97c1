package localworld

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/winkube/winkube/internal/testenv"
)

// Another user of the machine reaches the management etcd's loopback
// ports: over plain HTTP, over TLS without a client certificate, or with
// one of its own CA, it cannot read the management Secrets etcd holds;
// the API server, with the world's client certificate, works.
func TestManagementEtcdNeedsTheWorldsClientCertificate(t *testing.T) {
	// Much of it is waiting for an etcd and API server of its own (state
	// in its own directory) to start: it waits beside the package's other
	// tests that start their own.
	t.Parallel()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	env := &envtest.Environment{BinaryAssetsDirectory: bin, ControlPlane: envtest.ControlPlane{
		Etcd: &envtest.Etcd{DataDir: filepath.Join(state, "management-etcd")}, APIServer: &envtest.APIServer{}}}
	pki, err := ensureEtcdPKI(filepath.Join(state, etcdPKIDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := secureEtcd(env.ControlPlane.Etcd, env.ControlPlane.APIServer, pki); err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	for _, f := range []string{pki.CAKey, pki.ServerKey, pki.ClientKey} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want 0600", f, fi.Mode(), err)
		}
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "identity-secret"},
		StringData: map[string]string{"clientSecret": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server through the secured etcd: %v", err)
	}
	clients := env.ControlPlane.Etcd.Configure().Get("listen-client-urls").Get(nil)[0]
	metrics := env.ControlPlane.Etcd.URL.String()
	body := `{"key":"` + base64.StdEncoding.EncodeToString([]byte("/registry/secrets/default/identity-secret")) + `"}`
	read := func(base string, certs ...tls.Certificate) (int, string, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}}} //nolint:gosec // the attacker does not check etcd's certificate
		resp, err := c.Post(base+"/v3/kv/range", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	foreign := foreignCert(t)
	for name, attempt := range map[string]func() (int, string, error){
		"plain HTTP":                  func() (int, string, error) { return read(strings.Replace(clients, "https://", "http://", 1)) },
		"TLS without a certificate":   func() (int, string, error) { return read(clients) },
		"a certificate of its own":    func() (int, string, error) { return read(clients, foreign) },
		"the health check's listener": func() (int, string, error) { return read(metrics) },
	} {
		status, b, err := attempt()
		if err == nil && (status == http.StatusOK || strings.Contains(b, "kvs")) {
			t.Errorf("%s: etcd answered %d %s", name, status, b)
		}
	}
	// The same request with the world's certificate reads the Secret: the
	// refusals above are etcd's authentication, not a wrong request.
	own, err := tls.LoadX509KeyPair(pki.Client, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if status, b, err := read(clients, own); err != nil || status != http.StatusOK || !strings.Contains(b, `"kvs"`) {
		t.Fatalf("the world's own client: %d %s %v", status, b, err)
	}
}

// foreignCert is a client certificate of a CA another user made.
func foreignCert(t *testing.T) tls.Certificate {
	t.Helper()
	dir := t.TempDir()
	p, err := ensureEtcdPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.LoadX509KeyPair(p.Client, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
		t.Fatal(err)
	}
	return c
}
