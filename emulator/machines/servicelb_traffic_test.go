package machines_test

import (
	"context"
	"io"
	"net"
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
// worker's.
func TestServiceLoadBalancerCarriesTraffic(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "svcflow-rg")
	cs := kubernetes.NewForConfigOrDie(env.Config)
	c := cloud.Start(cloud.Config{Client: cs, Log: logr.Discard(), Images: ccmImages,
		Network: machines.ARMNetwork(&armCfg), ReadNodeFile: a.cloudConfig(t, "svcflow-cp", nil), PrivateIP: privateIP})
	t.Cleanup(c.Stop)
	addNode(t, ctx, cs, "svcflow-cp", "10.1.201.4", map[string]string{"node-role.kubernetes.io/control-plane": "", cloud.ExcludeLabel: ""})
	addNode(t, ctx, cs, "svcflow-w1", "10.1.201.5", nil)
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
	np := strconv.Itoa(int(s.Spec.Ports[0].NodePort))
	// What kube-proxy would serve on each node's node port.
	for _, n := range []struct{ vnet, says string }{{"10.1.201.4", "control plane"}, {"10.1.201.5", "worker"}} {
		host, err := hn.HostAddress(n.vnet)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host.String(), np))
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
				_, _ = io.WriteString(conn, n.says)
				conn.Close()
			}
		}()
	}
	answer := func() string {
		conn, err := net.DialTimeout("tcp", front, 2*time.Second)
		if err != nil {
			return err.Error()
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(conn)
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	poll.Until(t, 2*time.Minute, func() string {
		if got := answer(); got != "worker" {
			return front + " answers " + got
		}
		return ""
	})
	for i := 0; i < 5; i++ {
		if got := answer(); got != "worker" {
			t.Errorf("connection %d to %s reached %q, want the worker (the control plane is not a backend)", i, front, got)
		}
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
