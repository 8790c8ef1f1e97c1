package machines_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/cloud"
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
	c := cloud.Start(cloud.Config{Client: cs, Log: logr.Discard(), Images: ccmImages,
		Network: machines.ARMNetwork(&armCfg), ReadNodeFile: a.cloudConfig(t, "svcflow-cp", nil), PrivateIP: privateIP})
	t.Cleanup(c.Stop)
	addNode(t, ctx, cs, "svcflow-cp", "10.1.201.4", map[string]string{"node-role.kubernetes.io/control-plane": "", cloud.ExcludeLabel: ""})
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
	// What kube-proxy would serve on the node port of the control plane and
	// of the first worker; the second serves nothing there, so its TCP
	// probe fails.
	serve(t, "10.1.201.4", s.Spec.Ports[0].NodePort, "control plane")
	serve(t, "10.1.201.5", s.Spec.Ports[0].NodePort, "worker 1")
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

	// externalTrafficPolicy Local: the HTTP probe of the health check node
	// port decides; worker 1 has no local endpoint (503), worker 2 has.
	local, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
		Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 8080}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
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
	for _, w := range []struct {
		vnet, says string
		code       int
	}{{"10.1.201.5", "worker 1", http.StatusServiceUnavailable}, {"10.1.201.6", "worker 2", http.StatusOK}} {
		serve(t, w.vnet, local.Spec.Ports[0].NodePort, w.says)
		healthz(t, w.vnet, local.Spec.HealthCheckNodePort, w.code)
	}
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
