package machines_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/poll"
)

// apiServerEgress: the workload cluster's API server reaches the cluster
// network as from its control-plane machine (package egress). Through the
// services and pods proxy it reaches the nginx pod's simulated listener
// at its pod IP; the aggregator reaches an APIService's Service at its
// ClusterIP through the machine's kube-proxy (the nginx pod answers plain
// HTTP to its TLS, a port nothing serves is refused, and the API server
// reports both as it does: FailedDiscoveryCheck, 503 to clients); and a
// webhook at https://localhost reaches the host's loopback, as the local
// world's admission does. The kubelet client goes the same way: logs here,
// port-forward in etcdThroughPortForward.
func (m *mixed) apiServerEgress(t *testing.T, ctx context.Context, linuxNode string) {
	t.Helper()
	pod := m.podOf(t, ctx, "nginx", running(linuxNode))
	svcs := m.workload.CoreV1().Services("default")
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "nginx-egress"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nginx"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}}}},
		// The same pod, on a port its container does not serve.
		{ObjectMeta: metav1.ObjectMeta{Name: "nginx-closed"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nginx"},
			Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(8443)}}}},
	} {
		if _, err := svcs.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svcs.Delete(context.Background(), s.Name, metav1.DeleteOptions{}) })
	}
	page := func(path string) string {
		body, err := m.workload.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctx)
		if err != nil {
			return fmt.Sprintf("GET %s: %v: %s", path, err, body)
		}
		if !strings.Contains(string(body), "winkube simulated container") || !strings.Contains(string(body), "default/"+pod.Name) {
			return fmt.Sprintf("GET %s answers %q, not the nginx pod's page", path, body)
		}
		return ""
	}
	poll.Until(t, time.Minute, func() string { return page("/api/v1/namespaces/default/services/http:nginx-egress:80/proxy/") })
	poll.Until(t, time.Minute, func() string { return page("/api/v1/namespaces/default/pods/" + pod.Name + ":80/proxy/index.html") })
	// The kubelet client takes the same way: kubectl logs.
	logs, err := m.workload.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "nginx"}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "winkube simulated node "+linuxNode) {
		t.Errorf("logs of %s through the API server: %v: %q", pod.Name, err, logs)
	}

	closed, err := svcs.Get(ctx, "nginx-closed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	open, err := svcs.Get(ctx, "nginx-egress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		group, service string
		port           int32
		// want is in the Available condition's message: what the
		// aggregator met at the Service's ClusterIP.
		want []string
	}{
		// The pod's listener speaks HTTP to the aggregator's TLS.
		{"plain.egress.winkube.test", "nginx-egress", 80, []string{"https://" + net.JoinHostPort(open.Spec.ClusterIP, "80"), "server gave HTTP response to HTTPS client"}},
		// kube-proxy's rule has an endpoint, whose port refuses: the
		// machine's dial fails, and the CONNECT with it.
		{"closed.egress.winkube.test", "nginx-closed", 443, []string{"while dialing " + net.JoinHostPort(closed.Spec.ClusterIP, "443") + ", code 502"}},
	} {
		name := "v1." + c.group
		applyYAML(t, ctx, m.wc, fmt.Sprintf(`apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: %s
spec:
  group: %s
  version: v1
  service: {name: %s, namespace: default, port: %d}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
`, name, c.group, c.service, c.port))
		t.Cleanup(func() {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("apiregistration.k8s.io/v1")
			u.SetKind("APIService")
			u.SetName(name)
			_ = m.wc.Delete(context.Background(), u)
		})
		poll.Until(t, 2*time.Minute, func() string {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("apiregistration.k8s.io/v1")
			u.SetKind("APIService")
			if err := m.wc.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
				return err.Error()
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, x := range conds {
				cond, _ := x.(map[string]any)
				msg := fmt.Sprint(cond["message"])
				if cond["type"] == "Available" && cond["reason"] == "FailedDiscoveryCheck" && strings.Contains(msg, c.want[0]) && strings.Contains(msg, c.want[len(c.want)-1]) {
					return ""
				}
			}
			return fmt.Sprintf("APIService %s: conditions %v, want FailedDiscoveryCheck with %q", name, conds, c.want)
		})
		_, err := m.workload.CoreV1().RESTClient().Get().AbsPath("/apis/" + c.group + "/v1").DoRaw(ctx)
		if !apierrors.IsServiceUnavailable(err) {
			t.Errorf("GET /apis/%s/v1 of an unreachable APIService: %v, want 503 Service Unavailable", c.group, err)
		}
	}
	localhostWebhook(t, ctx, m)
}

// localhostWebhook: a validating webhook at https://localhost:PORT, served
// by this process on the host's loopback, denies what it is sent.
func localhostWebhook(t *testing.T, ctx context.Context, m *mixed) {
	t.Helper()
	cert, caPEM := localhostCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	const says = "refused by the test's webhook at localhost"
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false, Result: &metav1.Status{Message: says}}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	const ns = "egress-webhook"
	if _, err := m.workload.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hooks := m.workload.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	if _, err := hooks.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "egress-localhost"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "localhost.egress.winkube.test", SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
			ClientConfig:      admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://localhost:" + port + "/validate"), CABundle: caPEM},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hooks.Delete(context.Background(), "egress-localhost", metav1.DeleteOptions{})
		_ = m.workload.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	i := 0
	poll.Until(t, time.Minute, func() string {
		i++
		_, err := m.workload.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c" + strconv.Itoa(i)}}, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), says) {
			return fmt.Sprintf("creating a ConfigMap under the localhost webhook: %v", err)
		}
		return ""
	})
}

// localhostCert is a self-signed serving certificate for localhost.
func localhostCert(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
