package incluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// TestAdmissionServiceAccountReachesOnlyItsOwnWebhooks: with the RBAC the
// admission add-on applies in a workload cluster, the admission's
// ServiceAccount cannot create, update or delete another webhook
// configuration (which would let it intercept every request of the
// cluster, or switch another webhook off), while the admission server,
// running as that ServiceAccount, still installs its CA into its own two
// configurations, which the add-on created.
func TestAdmissionServiceAccountReachesOnlyItsOwnWebhooks(t *testing.T) {
	t.Parallel() // its own API server: it waits for webhook servers and certificates
	env, err := testenv.Start(testenv.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// What the add-on's ClusterResourceSet applies, as it applies it.
	for _, obj := range flavors.AdmissionObjects(false) {
		u := &unstructured.Unstructured{}
		if u.Object, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	other := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "policy-engine"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "policy.example.com", AdmissionReviewVersions: []string{"v1"},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://policy.example.com/validate")},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}}}}}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	before := other.DeepCopy()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(other), before); err != nil {
		t.Fatal(err)
	}

	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + flavors.AdmissionNamespace + ":winkube-admission",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + flavors.AdmissionNamespace, "system:authenticated"}}
	c, err := client.New(sa, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	// The attacks, with the admission's token.
	hijacked := before.DeepCopy()
	hijacked.Webhooks[0].ClientConfig.URL = ptr.To("https://attacker.example.com/")
	hijacked.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	if err := c.Update(ctx, hijacked); !apierrors.IsForbidden(err) {
		t.Errorf("the admission's ServiceAccount updating another webhook configuration: %v, want Forbidden", err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"webhooks":[{"name":"policy.example.com","failurePolicy":"Ignore"}]}`))
	if err := c.Patch(ctx, before.DeepCopy(), patch); !apierrors.IsForbidden(err) {
		t.Errorf("the admission's ServiceAccount patching another webhook configuration: %v, want Forbidden", err)
	}
	if err := c.Delete(ctx, before.DeepCopy()); !apierrors.IsForbidden(err) {
		t.Errorf("the admission's ServiceAccount deleting another webhook configuration: %v, want Forbidden", err)
	}
	sneaky := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "sneaky"}}
	if err := c.Create(ctx, sneaky); !apierrors.IsForbidden(err) {
		t.Errorf("the admission's ServiceAccount creating a webhook configuration: %v, want Forbidden", err)
	}
	after := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(other), after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the other webhook configuration changed: %+v", after.Webhooks)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sneaky), sneaky); !apierrors.IsNotFound(err) {
		t.Errorf("a webhook configuration the admission's ServiceAccount created: %v", err)
	}

	// The admission itself, as that ServiceAccount: its own
	// configurations get its CA.
	done := make(chan error, 1)
	port := freePort(t)
	go func() {
		done <- workload.Serve(ctx, workload.ServerOptions{Config: sa, Host: "127.0.0.1", Port: port, CertDir: t.TempDir(),
			DNSNames:     []string{"winkube-admission.winkube-system.svc"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "winkube-admission", Namespace: flavors.AdmissionNamespace, Port: ptr.To[int32](443)}},
			CASecret:     client.ObjectKey{Namespace: flavors.AdmissionNamespace, Name: flavors.AdmissionCASecret},
			Install:      true, MetricsAddr: "0"})
	}()
	m, v := workload.Configurations(admissionregistrationv1.WebhookClientConfig{})
	poll.Until(t, time.Minute, func() string {
		select {
		case err := <-done:
			t.Fatalf("the admission server, as its ServiceAccount, stopped: %v", err)
		default:
		}
		errM := env.Client.Get(ctx, client.ObjectKeyFromObject(m), m)
		errV := env.Client.Get(ctx, client.ObjectKeyFromObject(v), v)
		if errM != nil || errV != nil || len(m.Webhooks[0].ClientConfig.CABundle) == 0 || len(v.Webhooks[0].ClientConfig.CABundle) == 0 {
			return fmt.Sprintf("the admission's own configurations without its caBundle: %v %v", errM, errV)
		}
		return ""
	})
	// An HTTP/2 client gets HTTP/1.1 (Rapid Reset, CVE-2023-44487).
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.Webhooks[0].ClientConfig.CABundle)
	h2 := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "winkube-admission.winkube-system.svc", MinVersion: tls.VersionTLS12}}}
	poll.Until(t, time.Minute, func() string {
		resp, err := h2.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.Proto != "HTTP/1.1" {
			t.Fatalf("an HTTP/2 client got %s from the admission server, want HTTP/1.1", resp.Proto)
		}
		return ""
	})

	// Its build reporter, as that ServiceAccount: a pod that only a
	// Windows build no node has would run gets its Warning event. (The
	// reporter reads its own event back before counting a repeat; a read
	// through the manager's cache would list and watch every Event of the
	// cluster, which the role does not grant: the cache never syncs and
	// the event never comes.)
	waiting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "iis-1809", Namespace: flavors.AdmissionNamespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: workload.WindowsBuildLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"10.0.17763"}}}}}}}}}}
	if err := env.Client.Create(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		ev := &corev1.Event{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: waiting.Namespace, Name: waiting.Name + ".winkube-windows-build"}, ev); err != nil {
			return "the build reporter, as its ServiceAccount, recorded no event for the waiting pod: " + err.Error()
		}
		return ""
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("the admission server: %v", err)
	}
}
