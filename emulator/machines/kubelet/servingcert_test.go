package kubelet_test

import (
	"context"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/winkube/winkube/emulator/machines/kubelet"
)

// TestServingCertificatePerNode: each kubelet serves its API with a
// certificate of its own, as a kubelet without bootstrapped serving
// certificates makes one (cmd/kubelet/app/server.go InitializeTLS): for
// its node's name and address, RSA 2048, signed by a CA named for the
// node and sent with it. The RSA key pairs behind them are made once per
// process, not per node: two kubelets' certificates carry the same public
// key (generating two RSA keys per node was the largest part of winkube's
// CPU in a bring-up).
func TestServingCertificatePerNode(t *testing.T) {
	env := startAPIServer(t)
	ctx := context.Background()
	addr := hostAddresses(t)
	var leaves []*x509.Certificate
	for _, node := range []string{"cert-node-a", "cert-node-b"} {
		cfg := nodeConfig(node, counted(env.Config, &requests{n: map[string]int{}}), addr())
		cfg.Log = logr.Discard()
		k, err := kubelet.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
		conn, err := tls.Dial("tcp", net.JoinHostPort(cfg.Address.String(), strconv.Itoa(kubelet.Port)), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the certificate is what the test looks at
		if err != nil {
			t.Fatal(err)
		}
		chain := conn.ConnectionState().PeerCertificates
		_ = conn.Close()
		if len(chain) != 2 {
			t.Fatalf("node %s's kubelet sent %d certificates, want its own and its CA", node, len(chain))
		}
		leaf, ca := chain[0], chain[1]
		if !strings.HasPrefix(leaf.Subject.CommonName, node+"@") || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != node ||
			len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != cfg.Address.String() {
			t.Errorf("node %s's certificate is for %q, names %v, addresses %v; want the node's name and address %s", node, leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses, cfg.Address)
		}
		if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
			t.Errorf("node %s's certificate is for %v, want server authentication", node, leaf.ExtKeyUsage)
		}
		if !ca.IsCA || !strings.HasPrefix(ca.Subject.CommonName, node+"-ca@") {
			t.Errorf("node %s's certificate came with %q (CA %v), want the node's own CA", node, ca.Subject.CommonName, ca.IsCA)
		}
		if err := leaf.CheckSignatureFrom(ca); err != nil {
			t.Errorf("node %s's certificate is not signed by the CA it came with: %v", node, err)
		}
		if k, ok := leaf.PublicKey.(*rsa.PublicKey); !ok || k.N.BitLen() != 2048 {
			t.Errorf("node %s's certificate has a %T key, want RSA 2048 as the kubelet makes", node, leaf.PublicKey)
		}
		leaves = append(leaves, leaf)
	}
	a, _ := leaves[0].PublicKey.(*rsa.PublicKey)
	b, _ := leaves[1].PublicKey.(*rsa.PublicKey)
	if a == nil || b == nil || !a.Equal(b) {
		t.Error("each kubelet generated RSA keys of its own, want the process's key pair (0.2 CPU-seconds a node saved)")
	}
}
