package machines_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/poll"
)

// TestServiceLoadBalancerCarriesTraffic: what the cloud controller puts on
// the load balancer is what the emulator's data plane forwards by: a
// connection to the Service's external IP and port reaches a worker's host
// address at the port's node port once its probe passes, and only a
// worker's; with externalTrafficPolicy Local, only a node whose health
// check node port answers 200 on /healthz.
func TestServiceLoadBalancerCarriesTraffic(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "svcflow-rg")
	cs := kubernetes.NewForConfigOrDie(env.Config)
	c := cloudprovider.Start(cloudprovider.Config{Client: cs, Log: logr.Discard(), Images: ccmImages,
		Connect: machines.ARMNetwork(connectARM(&armCfg)), ReadNodeFile: a.cloudConfig(t, "svcflow-cp", nil), PrivateIP: privateIP})
	t.Cleanup(c.Stop)
	addNode(t, ctx, cs, "svcflow-cp", "10.1.201.4", map[string]string{"node-role.kubernetes.io/control-plane": "", cloudprovider.ExcludeLabel: ""})
	addNode(t, ctx, cs, "svcflow-w1", "10.1.201.5", nil)
	addNode(t, ctx, cs, "svcflow-w2", "10.1.201.6", nil)
	runCCM(t, ctx, cs, "cloud-controller-manager-svcflow", "svcflow-cp", "--cloud-provider=azure", "--cluster-name=svcflow")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svcflow"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svcs := cs.CoreV1().Services("svcflow")
	s, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What kube-proxy would serve on the node port of the control plane and
	// of the first worker; the second serves nothing there, so its TCP
	// probe fails. The API server allocates the node port on create: served
	// before the load balancer exists, a backend's first probe (at 5 s
	// intervals, Azure's minimum) passes, and the test does not wait for a
	// second.
	serve(t, "10.1.201.4", s.Spec.Ports[0].NodePort, "control plane")
	serve(t, "10.1.201.5", s.Spec.Ports[0].NodePort, "worker 1")
	poll.Until(t, time.Minute, func() string {
		if s, err = svcs.Get(ctx, "web", metav1.GetOptions{}); err != nil {
			return err.Error()
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return "Service web is still <pending>" + warnings(ctx, cs, s)
		}
		return ""
	})
	front := net.JoinHostPort(s.Status.LoadBalancer.Ingress[0].IP, "80")
	poll.Until(t, 2*time.Minute, func() string {
		if got := answer(front); got != "worker 1" {
			return fmt.Sprintf("%s answers %q", front, got)
		}
		return ""
	})
	for i := 0; i < 5; i++ {
		if got := answer(front); got != "worker 1" {
			t.Errorf("connection %d to %s reached %q, want worker 1 (the control plane is no backend, worker 2 fails its probe)", i, front, got)
		}
	}
	nsgTraffic(t, ctx, cs, a, s, front)

	// externalTrafficPolicy Local: the HTTP probe of the health check node
	// port decides; worker 1 has no local endpoint (503), worker 2 has.
	local, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
		Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 8080}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Served before the load balancer exists, as for web.
	for _, w := range []struct {
		vnet, says string
		code       int
	}{{"10.1.201.5", "worker 1", http.StatusServiceUnavailable}, {"10.1.201.6", "worker 2", http.StatusOK}} {
		serve(t, w.vnet, local.Spec.Ports[0].NodePort, w.says)
		healthz(t, w.vnet, local.Spec.HealthCheckNodePort, w.code)
	}
	poll.Until(t, time.Minute, func() string {
		if local, err = svcs.Get(ctx, "local", metav1.GetOptions{}); err != nil {
			return err.Error()
		}
		if len(local.Status.LoadBalancer.Ingress) == 0 {
			return "Service local is still <pending>" + warnings(ctx, cs, local)
		}
		return ""
	})
	lfront := net.JoinHostPort(local.Status.LoadBalancer.Ingress[0].IP, "8080")
	poll.Until(t, 2*time.Minute, func() string {
		if got := answer(lfront); got != "worker 2" {
			return fmt.Sprintf("%s answers %q", lfront, got)
		}
		return ""
	})
	for i := 0; i < 5; i++ {
		if got := answer(lfront); got != "worker 2" {
			t.Errorf("connection %d to %s reached %q, want worker 2 (the one node with a local endpoint)", i, lfront, got)
		}
	}
	if err := svcs.Delete(ctx, "local", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := svcs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := svcs.Get(ctx, "web", metav1.GetOptions{}); err == nil {
			return "Service web still there"
		}
		return ""
	})
}

// serve listens on the host address of a VNet address at port, answering
// every connection with says, as a node's kube-proxy would forward it.
func serve(t *testing.T, vnet string, port int32, says string) {
	t.Helper()
	host, err := hn.HostAddress(vnet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host.String(), strconv.Itoa(int(port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(conn, says)
			conn.Close()
		}
	}()
}

// healthz serves kube-proxy's health check on a node: code on /healthz,
// 404 elsewhere.
func healthz(t *testing.T, vnet string, port int32, code int) {
	t.Helper()
	host, err := hn.HostAddress(vnet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host.String(), strconv.Itoa(int(port))))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// nsgTraffic: the node subnet's NSG carries what reaches the workers. The
// Service's rule (cloud-provider-azure's, written by the simulated
// cloud-controller-manager) deleted through ARM, as a provider that wipes
// the NSG's rules would, the Service's external IP answers nothing; the
// controller re-adds it when it next syncs the Service (here a change of
// the Service: like Kubernetes' service controller, it does not poll
// Azure), and the Service answers again. A Service whose
// loadBalancerSourceRanges leave the client out does not answer it.
func nsgTraffic(t *testing.T, ctx context.Context, cs kubernetes.Interface, a *azure, s *corev1.Service, front string) {
	t.Helper()
	rules, err := endpoint.NewClient(armCfg, subscriptID, armnetwork.NewSecurityRulesClient)
	if err != nil {
		t.Fatal(err)
	}
	nsg := a.rg + "-nsg"
	nodePort := strconv.Itoa(int(s.Spec.Ports[0].NodePort))
	// The rule allowing the Internet to the Service's node port.
	ruleFor := func(source, port string) *armnetwork.SecurityRule {
		pager := rules.NewListPager(a.rg, nsg, nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Value {
				p := r.Properties
				src := strings.Join(append(ptrStrings(p.SourceAddressPrefix), derefAll(p.SourceAddressPrefixes)...), ",")
				if strings.HasPrefix(*r.Name, "k8s-azure-lb_allow_IPv4_") && src == source && slices.Contains(derefAll(p.DestinationPortRanges), port) {
					return r
				}
			}
		}
		return nil
	}
	r := ruleFor("Internet", nodePort)
	if r == nil {
		t.Fatalf("no rule of the cloud provider lets the Internet reach node port %s on %s", nodePort, nsg)
	}
	if p := r.Properties; *p.Priority < 500 || *p.Priority > 4096 || *p.Access != armnetwork.SecurityRuleAccessAllow ||
		!reflect.DeepEqual(derefAll(p.DestinationAddressPrefixes), []string{"10.1.201.5", "10.1.201.6"}) {
		t.Errorf("rule %s: priority %d, access %s, destinations %v; want an allow rule in 500..4096 to the workers' VNet addresses", *r.Name, *p.Priority, *p.Access, derefAll(p.DestinationAddressPrefixes))
	}
	deleteRule := func(name string) {
		t.Helper()
		del, err := rules.BeginDelete(ctx, a.rg, nsg, name, nil)
		if err == nil {
			_, err = del.PollUntilDone(ctx, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	deleteRule(*r.Name)
	poll.Until(t, time.Minute, func() string {
		got := answer(front)
		if got == "" {
			return ""
		}
		// The cloud controller puts a rule deleted by hand back whenever
		// it syncs the Service again, as cloud-provider-azure does: a
		// retry of a sync that failed before (on a loaded machine), a
		// resync. What is checked is that no traffic passes while the
		// rule is gone, so a rule put back is deleted again.
		if again := ruleFor("Internet", nodePort); again != nil {
			deleteRule(*again.Name)
			return fmt.Sprintf("the cloud controller put rule %s back, and it was deleted again", *again.Name)
		}
		return fmt.Sprintf("with its NSG rule gone, %s still answers %q", front, got)
	})
	svcs := cs.CoreV1().Services(s.Namespace)
	touch := func(name string, change func(*corev1.Service)) {
		t.Helper()
		// The controller writes the Service too (status, finalizer).
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := svcs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(cur)
			_, err = svcs.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	touch(s.Name, func(s *corev1.Service) { s.Annotations = map[string]string{"example.com/resync": "1"} })
	poll.Until(t, 2*time.Minute, func() string {
		if got := answer(front); got != "worker 1" {
			return fmt.Sprintf("after the controller's resync %s answers %q", front, got)
		}
		return ""
	})
	if ruleFor("Internet", nodePort) == nil {
		t.Errorf("%s answers, but no rule for node port %s is back", front, nodePort)
	}

	// loadBalancerSourceRanges: first including this client (127.0.0.1:
	// outside the VNet), then leaving it out.
	ranged, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ranged"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 9090}},
		LoadBalancerSourceRanges: []string{"127.0.0.0/8"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svcs.Delete(context.Background(), "ranged", metav1.DeleteOptions{}) })
	serve(t, "10.1.201.5", ranged.Spec.Ports[0].NodePort, "ranged on worker 1")
	poll.Until(t, time.Minute, func() string {
		if ranged, err = svcs.Get(ctx, "ranged", metav1.GetOptions{}); err != nil {
			return err.Error()
		}
		if len(ranged.Status.LoadBalancer.Ingress) == 0 {
			return "Service ranged is still <pending>" + warnings(ctx, cs, ranged)
		}
		return ""
	})
	rfront := net.JoinHostPort(ranged.Status.LoadBalancer.Ingress[0].IP, "9090")
	poll.Until(t, 2*time.Minute, func() string {
		if got := answer(rfront); got != "ranged on worker 1" {
			return fmt.Sprintf("%s (source range 127.0.0.0/8) answers %q", rfront, got)
		}
		return ""
	})
	rPort := strconv.Itoa(int(ranged.Spec.Ports[0].NodePort))
	if ruleFor("Internet", rPort) != nil || ruleFor("127.0.0.0/8", rPort) == nil {
		t.Errorf("Service ranged: want a rule from 127.0.0.0/8 to node port %s and none from the Internet", rPort)
	}
	touch("ranged", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"} })
	poll.Until(t, 2*time.Minute, func() string {
		if got := answer(rfront); got != "" {
			return fmt.Sprintf("%s answers %q to a client its source ranges leave out", rfront, got)
		}
		return ""
	})
	if ruleFor("192.0.2.0/24", rPort) == nil || ruleFor("127.0.0.0/8", rPort) != nil {
		t.Errorf("Service ranged: want only a rule from 192.0.2.0/24 to node port %s", rPort)
	}
	// The probe still passes (AzureLoadBalancer is allowed by the default
	// rule): the backend is in rotation, it is the NSG that refuses.
	w1, err := hn.HostAddress("10.1.201.5")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hn.InRotation(rfront), []string{net.JoinHostPort(w1.String(), rPort)}; !reflect.DeepEqual(got, want) {
		t.Errorf("backends of %s in rotation: %v, want %v (its probe passes)", rfront, got, want)
	}
	for i := 0; i < 3; i++ {
		if got := answer(rfront); got != "" {
			t.Errorf("connection %d from outside the source ranges reached %q", i, got)
		}
	}
}

func ptrStrings(p *string) []string {
	if p == nil {
		return nil
	}
	return []string{*p}
}

func derefAll(ps []*string) []string {
	var out []string
	for _, p := range ps {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}
