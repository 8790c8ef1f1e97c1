package incluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

// Two admission replicas against one API server: one CA Secret, webhook
// configurations carrying it, and both servers' certificates trusted by it.
func TestAdmissionReplicasShareTheCA(t *testing.T) {
	t.Parallel() // its own API server: it waits for webhook servers and certificates
	env, err := testenv.Start(testenv.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "winkube-system"}}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Environment.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ports := []int{freePort(t), freePort(t)}
	done := make(chan error, len(ports))
	for _, port := range ports {
		o := &admissionOptions{kubeconfig: kubeconfig, port: port, certDir: t.TempDir(), serviceName: "winkube-admission", serviceNamespace: "winkube-system",
			install: true, failurePolicy: "open", metricsAddr: "0", caSecret: "winkube-admission-ca"}
		go func() { done <- runAdmission(ctx, o) }()
	}
	// Wait until both serve, and the configurations carry a caBundle.
	pool := x509.NewCertPool()
	poll.Until(t, time.Minute, func() string {
		select {
		case err := <-done:
			t.Fatalf("an admission server stopped: %v", err)
		default:
		}
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		errM := env.Client.Get(ctx, client.ObjectKey{Name: "winkube-workload-placement"}, m)
		errV := env.Client.Get(ctx, client.ObjectKey{Name: "winkube-workload-validation"}, v)
		if errM != nil || errV != nil || len(m.Webhooks[0].ClientConfig.CABundle) == 0 || len(v.Webhooks[1].ClientConfig.CABundle) == 0 {
			return fmt.Sprintf("webhook configurations without a caBundle: %v %v", errM, errV)
		}
		pool.AppendCertsFromPEM(m.Webhooks[0].ClientConfig.CABundle)
		return ""
	})
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "winkube-system", Name: "winkube-admission-ca"}, secret); err != nil {
		t.Fatalf("the shared CA Secret: %v", err)
	}
	for _, port := range ports {
		poll.Until(t, time.Minute, func() string {
			conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool, ServerName: "winkube-admission.winkube-system.svc"})
			if err != nil {
				return fmt.Sprintf("replica on port %d is not trusted by the configurations' caBundle: %v", port, err)
			}
			conn.Close()
			return ""
		})
	}
	// Admission fails open: a pod is admitted though the Service the
	// configurations name does not exist in this cluster.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("a pod was refused while admission is unreachable: %v", err)
	}
	cancel()
	for range ports {
		if err := <-done; err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
