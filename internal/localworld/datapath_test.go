package localworld_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/localports"
)

// page is one answer of `curl http://<ip>/`.
type page struct {
	simulated string
	body      string
}

// curl GETs http://ip/ on a new connection, as `curl <EXTERNAL-IP>` does;
// port 80 of a loopback address is served at its alternate when this
// process may not bind it (localports), so both are tried.
func curl(ip string) (page, error) {
	var last error
	for _, addr := range localports.Candidates(net.JoinHostPort(ip, "80")) {
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			last = err
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return page{}, err
		}
		if resp.StatusCode != http.StatusOK {
			return page{}, fmt.Errorf("%s: HTTP %d", addr, resp.StatusCode)
		}
		return page{simulated: resp.Header.Get("X-Winkube-Simulated"), body: string(b)}, nil
	}
	return page{}, last
}

func externalIP(ctx context.Context, cs kubernetes.Interface, name string) string {
	svc, err := cs.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
		return ""
	}
	return svc.Status.LoadBalancer.Ingress[0].IP
}

// checkDataPath is issue 24's end-to-end: `curl <EXTERNAL-IP>` of the IIS
// example answers with a replica's simulated page, three replicas share the
// traffic, and Services that would answer nothing on Azure (a selector or a
// targetPort that matches nothing) answer nothing here, with the doctor
// saying why.
func checkDataPath(ctx context.Context, t *testing.T, w *localworld.World, cs kubernetes.Interface, wc client.Client, cfg *rest.Config, start time.Time) {
	t.Helper()
	pods := func() map[string]corev1.Pod {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=iis-2022"})
		out := map[string]corev1.Pod{}
		if err != nil {
			return out
		}
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				out[p.Name] = p
			}
		}
		return out
	}
	ip := externalIP(ctx, cs, "iis")
	var first page
	// A minute without an answer logs what the request goes through, once;
	// the wait goes on.
	diagnoseAt, diagnosed := time.Now().Add(time.Minute), false
	poll.Until(t, 3*time.Minute, func() string {
		p, err := curl(ip)
		if err != nil {
			if !diagnosed && time.Now().After(diagnoseAt) {
				diagnose(ctx, t, w, cs)
				diagnosed = true
			}
			return "curl " + ip + ": " + err.Error()
		}
		first = p
		return ""
	})
	if first.simulated != "true" {
		t.Errorf("the page has X-Winkube-Simulated %q, want true:\n%s", first.simulated, first.body)
	}
	running := pods()
	named := ""
	for name, p := range running {
		if strings.Contains(first.body, name) && strings.Contains(first.body, p.Spec.NodeName) {
			named = name
		}
	}
	if named == "" || !strings.Contains(first.body, "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022") || !strings.Contains(first.body, "10.0.20348") {
		t.Errorf("the page names no IIS replica with its node, image and OS build (replicas %v):\n%s", keys(running), first.body)
	}
	t.Logf("%6.1fs curl %s answered from %s:\n%s", time.Since(start).Seconds(), ip, named, first.body)

	// Three replicas: the answers spread across them.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := wc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "iis-2022"}, d); err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To[int32](3)
		return wc.Update(ctx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The update goes through the workload admission, served since the
	// Deployment was made: it places the template anew, so the scale-up is
	// a rollout too. Answers are counted from the rolled-out replicas
	// only: one from a replica the rollout then replaced (seen once in CI)
	// made the run of twenty below, which wants every replica seen here,
	// impossible.
	poll.Until(t, 3*time.Minute, func() string {
		d := &appsv1.Deployment{}
		if err := wc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "iis-2022"}, d); err != nil {
			return err.Error()
		}
		if st := d.Status; st.ObservedGeneration < d.Generation || st.UpdatedReplicas != 3 || st.Replicas != 3 || st.AvailableReplicas != 3 {
			return fmt.Sprintf("Deployment iis-2022 rolling out: %d replicas, %d updated, %d available; want 3 of each", st.Replicas, st.UpdatedReplicas, st.AvailableReplicas)
		}
		return ""
	})
	seen := map[string]int{}
	poll.Until(t, 3*time.Minute, func() string {
		running := pods()
		if len(running) != 3 {
			return fmt.Sprintf("%d IIS replicas Running, want 3", len(running))
		}
		for range 6 {
			p, err := curl(ip)
			if err != nil {
				continue
			}
			for name := range running {
				if strings.Contains(p.body, name) {
					seen[name]++
				}
			}
		}
		if len(seen) < 3 {
			return fmt.Sprintf("answers came from %v, want all of %v", seen, keys(running))
		}
		return ""
	})
	t.Logf("%6.1fs answers from the 3 replicas: %v", time.Since(start).Seconds(), seen)

	// The world was resumed seconds ago: until the CNI agent of each node
	// is in sync again, a connection its kube-proxy sends to another
	// node's pod finds no route and is reset, as after a restart on Azure
	// (a replica answered above may have been its own node's). The NSG
	// check below needs a data path that answers every try before it:
	// twenty in a row, from every replica (with one node's routes still
	// missing, about two curls in nine fail, so a run of ten came by luck
	// one time in twelve; of twenty, one in 150).
	failed, inARow := 0, 0
	streak := map[string]bool{}
	diagnoseAt, diagnosed = time.Now().Add(2*time.Minute), false
	poll.Until(t, 3*time.Minute, func() string {
		for inARow < 20 || len(streak) < 3 {
			p, err := curl(ip)
			if err != nil {
				failed++
				inARow = 0
				clear(streak)
				if !diagnosed && time.Now().After(diagnoseAt) {
					diagnose(ctx, t, w, cs)
					diagnosed = true
				}
				return "curl " + ip + ": " + err.Error()
			}
			inARow++
			for name := range seen {
				if strings.Contains(p.body, name) {
					streak[name] = true
				}
			}
			if inARow > 200 {
				return fmt.Sprintf("%d answers in a row came from %v only", inARow, keys(streak))
			}
		}
		return ""
	})
	t.Logf("%6.1fs curl %s answered %d times in a row, from each replica (%d failed before)", time.Since(start).Seconds(), ip, inARow, failed)
	checkNSGRulesSurvive(ctx, t, w, cs, ip, start)

	// A typo in the selector, and a targetPort nothing listens on: each
	// Service gets its external IP, and nothing answers on it.
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "iis-typo"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "iis-2O22"}, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "iis-8080"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "iis-2022"}, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
	} {
		if _, err := cs.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"iis-typo", "iis-8080"} {
		var bad string
		poll.Until(t, 2*time.Minute, func() string {
			if bad = externalIP(ctx, cs, name); bad == "" {
				return "Service " + name + " has no external IP"
			}
			return ""
		})
		for range 3 {
			if p, err := curl(bad); err == nil {
				t.Errorf("Service %s (%s) answered, as no Azure load balancer would:\n%s", name, bad, p.body)
			}
		}
		t.Logf("%6.1fs Service %s: curl %s gets no answer", time.Since(start).Seconds(), name, bad)
	}
	r, err := doctor.Run(ctx, doctor.Options{Workload: wc, WorkloadConfig: cfg, Azure: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Service/default/iis-typo": "selects no pod", "Service/default/iis-8080": "targets port 8080"}
	for _, f := range r.Findings {
		if w, ok := want[f.Object]; ok && f.Check == "services" && strings.Contains(f.Message, w) {
			delete(want, f.Object)
		}
	}
	if len(want) != 0 {
		t.Errorf("winkube doctor does not say why %v answer nothing: %+v", want, r.Findings)
	}
	for _, name := range []string{"iis-typo", "iis-8080"} {
		if err := cs.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// diagnose logs what a failing curl goes through: the load balancer's rules
// as the emulator carries them, the nodes, endpoints and Service events.
func diagnose(ctx context.Context, t *testing.T, w *localworld.World, cs kubernetes.Interface) {
	t.Helper()
	for _, r := range w.Emulator().LoadBalancingRules() {
		// Which backends the probes keep in rotation tells a node
		// Azure does not send to from one that resets what it is sent.
		t.Logf("rule %s: %s:%d -> %v:%d probe %+v, in rotation %v", r.ID, r.FrontendIP, r.FrontendPort, r.Backends, r.BackendPort, r.Probe,
			w.Runtime().InRotation(r))
	}
	nodes, _ := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	for _, n := range nodes.Items {
		t.Logf("node %s %v labels %v", n.Name, n.Status.Addresses, n.Labels)
	}
	slices, _ := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
	for _, s := range slices.Items {
		t.Logf("slice %s ports %v endpoints %+v", s.Name, s.Ports, s.Endpoints)
		// Each node's route to each endpoint: a node with none to
		// another's pods resets what its kube-proxy sends there.
		for _, n := range nodes.Items {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil {
						if why := w.Runtime().PodRoute(n.Name, ip); why != "" {
							t.Logf("route %s -> %s: %s", n.Name, a, why)
						}
					}
				}
			}
		}
	}
	svcs, _ := cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	for _, s := range svcs.Items {
		t.Logf("service %s %+v %+v", s.Name, s.Spec.Ports, s.Status)
	}
	evs, _ := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Service" || strings.Contains(e.Message, "proxy") || strings.Contains(e.Message, "felix") {
			t.Logf("event %s %s/%s %s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Message)
		}
	}
	pods, _ := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		t.Logf("pod %s/%s on %s %s %s", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkNSGRulesSurvive changes the AzureCluster's node NSG (a rule of the
// user's), which winkube writes to Azure, while the iis Service is live:
// the cloud provider's allow rule for it, on the same NSG, stays, and curl
// keeps answering. (A provider that PUT only its own rules took Services
// dark until the cloud provider wrote them again, which it does only when a
// Service or the nodes change: CAPZ #578, kubernetes #90611.)
func checkNSGRulesSurvive(ctx context.Context, t *testing.T, w *localworld.World, cs kubernetes.Interface, ip string, start time.Time) {
	t.Helper()
	ruleIDs := func(suffix string) []string {
		var out []string
		for _, id := range w.Emulator().ResourceIDs() {
			if strings.Contains(strings.ToLower(id), "/securityrules/"+strings.ToLower(suffix)) {
				out = append(out, id)
			}
		}
		return out
	}
	if len(ruleIDs("k8s-azure-lb_allow_")) == 0 {
		t.Fatal("the cloud provider wrote no allow rule for the iis Service")
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ac := &infrav1.AzureCluster{}
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "e2e"}, ac); err != nil {
			return err
		}
		for i := range ac.Spec.NetworkSpec.Subnets {
			if sn := &ac.Spec.NetworkSpec.Subnets[i]; sn.Role == infrav1.SubnetNode {
				sn.SecurityGroup.SecurityRules = append(sn.SecurityGroup.SecurityRules, infrav1.SecurityRule{
					Name: "allow_metrics", Protocol: "Tcp", Direction: "Inbound", Priority: 2300, DestinationPorts: "9100", Source: "VirtualNetwork"})
			}
		}
		return w.Client.Update(ctx, ac)
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		if len(ruleIDs("allow_metrics")) == 0 {
			return "winkube has not written the new rule yet"
		}
		return ""
	})
	if len(ruleIDs("k8s-azure-lb_allow_")) == 0 {
		t.Fatal("writing the AzureCluster's node NSG removed the cloud provider's rule")
	}
	for i := range 5 {
		if _, err := curl(ip); err != nil {
			diagnose(ctx, t, w, cs)
			t.Fatalf("curl %s after winkube wrote the node NSG (try %d): %v", ip, i+1, err)
		}
	}
	t.Logf("%6.1fs the node NSG written again: the cloud provider's rule stayed, curl %s answers", time.Since(start).Seconds(), ip)

	// The controllers restart (a new manager Pod): every AzureCluster is
	// reconciled again from what Azure holds. curl answers throughout, and
	// the cloud provider's rule is still there after that reconcile.
	//
	// A flow an NSG drops is reset by the load balancer (hostnet's forward)
	// and never reaches a node; a flow that reached a node but waited for
	// its answer longer than curl's timeout was admitted, only slow (the
	// new manager fills its caches on the same CPUs as the simulated IIS).
	// So a reset or a refusal fails the test; a slow answer is counted, and
	// at least one answer in every three tries must come.
	before := testenv.Reconciles(t, "azurecluster")
	stop := make(chan struct{})
	failed := make(chan error, 1)
	var answered, slow int
	go func() {
		defer close(failed)
		inARow := 0
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			_, err := curl(ip)
			var ne net.Error
			switch {
			case err == nil:
				answered++
				inARow = 0
			case errors.As(err, &ne) && ne.Timeout() && inARow < 2:
				slow++
				inARow++
			case inARow > 0:
				failed <- fmt.Errorf("%d tries in a row unanswered: %w", inARow+1, err)
				return
			default:
				failed <- err
				return
			}
		}
	}()
	if err := w.RestartControllers(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		if testenv.Reconciles(t, "azurecluster") <= before {
			return "the restarted controllers have not reconciled the AzureCluster yet"
		}
		return ""
	})
	// A reconcile that dropped the rule would take effect on the next
	// packet; a few more seconds of curl see it.
	time.Sleep(3 * time.Second)
	close(stop)
	if err := <-failed; err != nil {
		t.Fatalf("curl %s failed while the controllers restarted: %v", ip, err)
	}
	if len(ruleIDs("k8s-azure-lb_allow_")) == 0 {
		t.Fatal("the restarted controllers removed the cloud provider's rule")
	}
	t.Logf("%6.1fs controllers restarted: the AzureCluster reconciled again, the cloud provider's rule stayed, curl %s answered throughout (%d answers, %d slower than curl's timeout, none reset)", time.Since(start).Seconds(), ip, answered, slow)
}
