//go:build e2e

package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/machines/join"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/nodejoin"
)

// checkNodeJoin is the cluster's side of 'winkube node join' against the
// booted world's real kubeadm cluster and Calico: the preflight passes;
// the token and CA hash it makes are what Cluster API gives its own
// machines, and a joining node's discovery (cluster-info signed by the
// controller manager's bootstrap signer for that token) and TLS bootstrap
// (a CSR the controller manager approves for kubeadm's node group) go
// through with them. Broken joins are named: a 16-character host name by
// the preflight, an expired token and an unreachable API port by kubeadm's
// discovery. Then node leave removes the node and its token.
func checkNodeJoin(ctx context.Context, t *testing.T, w *localworld.World) {
	t.Helper()
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	const node = "byo-win-1"
	var out bytes.Buffer
	res, err := nodejoin.Run(ctx, cfg, nodejoin.Options{Node: node, WindowsVersion: infrav1.WindowsServer2022, PrintScript: true}, nil, &out)
	if err != nil {
		t.Fatalf("node join against the world's cluster: %v\n%s", err, out.String())
	}
	t.Logf("node join preflight and token:\n%s", out.String())

	// The containerd of the cluster's Windows Server 2022 nodes.
	wins, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/os=windows"})
	if err != nil || len(wins.Items) == 0 {
		t.Fatalf("Windows nodes: %v (%d)", err, len(wins.Items))
	}
	if want := strings.TrimPrefix(wins.Items[0].Status.NodeInfo.ContainerRuntimeVersion, "containerd://"); res.Plan.ContainerdVersion != want {
		t.Errorf("script's containerd %s, want the Windows nodes' %s", res.Plan.ContainerdVersion, want)
	}
	// The CA hash Cluster API's bootstrap provider gives its own joins.
	kcs := &bootstrapv1.KubeadmConfigList{}
	if err := w.Client.List(ctx, kcs); err != nil {
		t.Fatal(err)
	}
	var capiHashes []string
	for _, kc := range kcs.Items {
		capiHashes = append(capiHashes, kc.Spec.JoinConfiguration.Discovery.BootstrapToken.CACertHashes...)
	}
	if !slices.Contains(capiHashes, res.Plan.CAHash) {
		t.Errorf("CA hash %s is not among Cluster API's %v", res.Plan.CAHash, capiHashes)
	}

	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	disc := join.Discovery{Endpoint: res.Plan.APIServer, Token: res.Plan.Token, CACertHashes: []string{res.Plan.CAHash}}
	cl, err := join.Discover(dctx, disc)
	if err != nil {
		t.Fatalf("discovery with node join's token: %v", err)
	}
	creds, err := join.Bootstrap(dctx, cl, res.Plan.Token, node)
	if err != nil {
		t.Fatalf("TLS bootstrap with node join's token: %v", err)
	}
	// The node registers itself, as its kubelet does with that certificate.
	nodeClient := kubernetes.NewForConfigOrDie(creds.Config(cl))
	if _, err := nodeClient.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels: map[string]string{corev1.LabelOSStable: "windows"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the joined node's credentials cannot register it: %v", err)
	}
	fs, err := nodejoin.Check(ctx, cs, node)
	if err != nil {
		t.Fatal(err)
	}
	if !hasFinding(fs, "node-ready") || !hasFinding(fs, "kube-proxy-pod") {
		t.Errorf("post-join check of a node without a kubelet: %v, want not-ready and no kube-proxy named", fs)
	}

	// Broken joins.
	_, err = nodejoin.Run(ctx, cfg, nodejoin.Options{Node: "byo-windows-0001", WindowsVersion: infrav1.WindowsServer2022, PrintScript: true}, nil, &out)
	var pe *nodejoin.PreflightError
	if !errors.As(err, &pe) || !hasFinding(pe.Findings, "hostname") {
		t.Errorf("a 16-character host name: %v, want the preflight's hostname finding", err)
	}
	expired, err := nodejoin.CreateToken(ctx, cs, time.Hour, time.Now().Add(-2*time.Hour), "expired")
	if err != nil {
		t.Fatal(err)
	}
	ectx, ecancel := context.WithTimeout(ctx, 8*time.Second)
	defer ecancel()
	_, err = join.Discover(ectx, join.Discovery{Endpoint: res.Plan.APIServer, Token: expired.String(), CACertHashes: []string{res.Plan.CAHash}})
	if err == nil || !strings.Contains(err.Error(), expired.ID) {
		t.Errorf("discovery with an expired token: %v, want the token's ID named", err)
	}
	host, _, _ := net.SplitHostPort(res.Plan.APIServer)
	uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
	defer ucancel()
	_, err = join.Discover(uctx, join.Discovery{Endpoint: net.JoinHostPort(host, "1"), Token: res.Plan.Token, CACertHashes: []string{res.Plan.CAHash}})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("discovery at a closed API port: %v, want the refused connection named", err)
	}

	out.Reset()
	if err := nodejoin.Leave(ctx, cs, node, nil, time.Minute, &out); err != nil {
		t.Fatalf("node leave: %v\n%s", err, out.String())
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node %s after leave: %v", node, err)
	}
	id, _, _ := strings.Cut(res.Plan.Token, ".")
	if _, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node join's token after leave: %v", err)
	}
	_ = cs.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, "bootstrap-token-"+expired.ID, metav1.DeleteOptions{})
}

func hasFinding(fs []nodejoin.Finding, check string) bool {
	for _, f := range fs {
		if f.Check == check {
			return true
		}
	}
	return false
}
