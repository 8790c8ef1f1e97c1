package machines_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winkube/winkube/emulator/machines/join"
)

// TestDiscoveryNamesTheControlPlaneEndpoint: a node that discovers the
// cluster through the API server's load balancer is told to keep talking
// to the load balancer, not to the first control-plane machine. kubeadm's
// cluster-info carries admin.conf's server, the controlPlaneEndpoint; the
// joining kubelet's TLS bootstrap and its kubeconfig use that server, so a
// machine address there cut every node off from the cluster once a
// rollout replaced the only control-plane machine (issue 49's upgrade:
// "dial tcp <first machine>:6443: connect: connection refused").
func TestDiscoveryNamesTheControlPlaneEndpoint(t *testing.T) {
	ctx := context.Background()
	startBootstrapProvider(t)
	m, endpoint, _, _ := newMixedCluster(t, ctx, "cinfo")
	t.Cleanup(func() { deleteGroup(t, m.azure.rg) })
	m.controlPlaneInitialized(t, ctx)

	secrets, err := m.workload.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
	if err != nil || len(secrets.Items) == 0 {
		t.Fatalf("bootstrap tokens: %v", err)
	}
	tok := string(secrets.Items[0].Data["token-id"]) + "." + string(secrets.Items[0].Data["token-secret"])
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ep := endpoint + ":6443"
	cl, err := join.Discover(dctx, join.Discovery{Endpoint: ep, Token: tok, UnsafeSkipCAVerification: true})
	if err != nil {
		t.Fatalf("discovery through the load balancer at %s: %v", ep, err)
	}
	if cl.Server != "https://"+ep {
		t.Errorf("cluster-info names server %s, want the control-plane endpoint https://%s: nodes that joined through it lose the cluster when that machine is replaced", cl.Server, ep)
	}
}
