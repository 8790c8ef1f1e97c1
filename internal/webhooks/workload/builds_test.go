package workload_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

func windowsNode(t *testing.T, name, build string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "windows", workload.WindowsBuildLabel: build}}}
	if err := env.Client.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
}

// The seeds' iis-1809 (windowsservercore-ltsc2019) on a 2022-only cluster:
// placement sends it to 2019 hosts, so it stays Pending, and the reporter
// says which build it needs and how to get one. With both builds, each IIS
// image is placed on its own build and nobody is told anything.
func TestMissingWindowsBuildIsExplained(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	windowsNode(t, "win-2022-a", "10.0.20348")
	r := &workload.BuildReporter{Client: env.Client}

	iis1809 := pod(ns, img2019)
	if err := env.Client.Create(ctx, iis1809); err != nil {
		t.Fatal(err)
	}
	if len(iis1809.Spec.NodeSelector) != 1 || iis1809.Spec.NodeSelector[corev1.LabelOSStable] != "windows" {
		t.Fatalf("nodeSelector %v: placement selects the OS only", iis1809.Spec.NodeSelector)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(iis1809)}); err != nil {
		t.Fatal(err)
	}
	events := &corev1.EventList{}
	if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 {
		t.Fatalf("%d events, want 1: %+v", len(events.Items), events.Items)
	}
	ev := events.Items[0]
	for _, want := range []string{img2019, "10.0.17763 (Windows Server 2019)", "10.0.20348 (Windows Server 2022)", "winkube up --windows-version 2019", "MachineDeployment", `windowsServerVersion: "2019"`, "ltsc2022 tag"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("event %q lacks %q", ev.Message, want)
		}
	}
	if ev.Reason != workload.MissingBuildReason || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Name != iis1809.Name || ev.InvolvedObject.UID != iis1809.UID {
		t.Fatalf("event %+v", ev)
	}
	// Reconciling again says nothing new.
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(iis1809)}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil || len(events.Items) != 1 || events.Items[0].Count != 1 {
		t.Fatalf("events after a second pass: %v %+v", err, events.Items)
	}

	// Both builds: each image is placed on its own, no event.
	windowsNode(t, "win-2019-a", "10.0.17763")
	ns2 := namespace(t, nil)
	for img, build := range map[string]string{img2019: "10.0.17763", img2022: "10.0.20348"} {
		p := pod(ns2, img)
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if got := terms[0].MatchExpressions[0].Values[0]; got != build || p.Spec.NodeSelector[workload.WindowsBuildLabel] != "" {
			t.Fatalf("%s placed on %s (nodeSelector %v), want affinity to %s", img, got, p.Spec.NodeSelector, build)
		}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.List(ctx, events, client.InNamespace(ns2)); err != nil || len(events.Items) != 0 {
		t.Fatalf("events with both builds: %v %+v", err, events.Items)
	}
}

// Two replicas starting at once share one CA: each signs its own serving
// certificate with it, and both verify against the one bundle.
func TestReplicasShareOneCA(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	key := client.ObjectKey{Namespace: ns, Name: "winkube-admission-ca"}
	names := []string{"winkube-admission." + ns + ".svc"}
	now := time.Now()
	const year, month = 365 * 24 * time.Hour, 30 * 24 * time.Hour
	var wg sync.WaitGroup
	cas := make([]*workload.SharedCA, 4)
	errs := make([]error, 4)
	dirs := make([]string, 4)
	for i := range cas {
		dirs[i] = t.TempDir()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if cas[i], errs[i] = workload.EnsureSharedCA(ctx, env.Client, key, now, year, month); errs[i] == nil {
				_, errs[i] = workload.EnsureServingCert(dirs[i], names, cas[i], now, year, month)
			}
		}(i)
	}
	wg.Wait()
	for i := range cas {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !cas[i].Cert.Equal(cas[0].Cert) {
			t.Fatalf("replica %d has a CA of its own", i)
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cas[0].Bundle) {
		t.Fatal("bundle is not PEM")
	}
	for _, d := range dirs {
		leaf := readCert(t, d+"/tls.crt")
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: names[0], CurrentTime: now}); err != nil {
			t.Fatalf("a replica's serving certificate does not verify against the shared bundle: %v", err)
		}
	}
	// Near its expiry the CA rotates once; the bundle trusts old and new
	// while certificates signed by the old one are still served.
	later := cas[0].Cert.NotAfter.Add(-month / 2)
	rotated, err := workload.EnsureSharedCA(ctx, env.Client, key, later, year, month)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Cert.Equal(cas[0].Cert) || strings.Count(string(rotated.Bundle), "BEGIN CERTIFICATE") != 2 {
		t.Fatalf("rotation: same CA %v, bundle of %d certificates", rotated.Cert.Equal(cas[0].Cert), strings.Count(string(rotated.Bundle), "BEGIN CERTIFICATE"))
	}
	again, err := workload.EnsureSharedCA(ctx, env.Client, key, later, year, month)
	if err != nil || !again.Cert.Equal(rotated.Cert) {
		t.Fatalf("a second replica after the rotation: %v, same CA %v", err, err == nil && again.Cert.Equal(rotated.Cert))
	}
	if wrote, err := workload.EnsureServingCert(dirs[0], names, again, later, year, month); err != nil || !wrote {
		t.Fatalf("serving certificate after rotation: wrote %v, %v", wrote, err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, err := certutil.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// A server stopped while it reads the CA gets an error, not a nil CA with
// no error (retry.OnError takes a cancelled context for its own
// interruption and answers nil), which panicked the serving-cert check.
func TestSharedCAOfACancelledServerIsAnError(t *testing.T) {
	ns := namespace(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ca, err := workload.EnsureSharedCA(ctx, env.Client, client.ObjectKey{Namespace: ns, Name: "winkube-admission-ca"}, time.Now(), time.Hour, time.Minute)
	if err == nil || ca != nil {
		t.Fatalf("EnsureSharedCA with a cancelled context: CA %v, error %v; want an error", ca != nil, err)
	}
}

// The reporter also runs as a controller: when the last schedulable node of
// a build is cordoned, the pods that wait for that build are told, though
// nothing about the pods themselves changed. Its watch of nodes finds them
// through the manager's index of the pods waiting for a build.
func TestCordoningTheLastNodeOfABuildTellsItsWaitingPods(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Event{}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&workload.BuildReporter{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)

	// Only this test makes Windows Server 2025 nodes. With none, the pod
	// is told so when it is created.
	waiting := pod(ns, img2025)
	if err := env.Client.Create(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	if got := buildAffinity(&waiting.Spec); got != "10.0.26100" {
		t.Fatalf("the pod requires builds %q, want 10.0.26100", got)
	}
	var first string
	poll.Until(t, 30*time.Second, func() string {
		ev := eventsOf(t, ns)
		if len(ev) != 1 || ev[0].InvolvedObject.UID != waiting.UID {
			return fmt.Sprintf("events %+v, want one on pod %s", ev, waiting.Name)
		}
		first = ev[0].Message
		return ""
	})
	// A pod already on a node is never told, whatever its affinity says.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cordon-2025-a", Labels: map[string]string{corev1.LabelOSStable: "windows", workload.WindowsBuildLabel: "10.0.26100"}}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	bound := pod(ns, img2025)
	bound.Spec.NodeName = node.Name
	if err := env.Client.Create(ctx, bound); err != nil {
		t.Fatal(err)
	}

	// The pod does not change from here: only the reporter's watch of
	// nodes can bring it back to the pod.
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = true
	if err := env.Client.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, func() string {
		ev := eventsOf(t, ns)
		if len(ev) != 1 || ev[0].InvolvedObject.UID != waiting.UID || ev[0].Reason != workload.MissingBuildReason {
			return fmt.Sprintf("events %+v, want one %s on pod %s", ev, workload.MissingBuildReason, waiting.Name)
		}
		if ev[0].Message == first || !strings.Contains(ev[0].Message, "cordoned or being removed") {
			return fmt.Sprintf("the event still says %q, not that the 2025 node is cordoned", ev[0].Message)
		}
		return ""
	})
}
