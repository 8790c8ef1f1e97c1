package nodejoin

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/images"
)

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// whoAmI authenticates with a bootstrap token as a joining node does.
func whoAmI(t *testing.T, token string) (*authenticationv1.SelfSubjectReview, error) {
	t.Helper()
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
}

// The token Run makes is kubeadm's: its format, its Secret, its lifetime,
// and the API server authenticates it as a node's bootstrap token in
// kubeadm's node group, until it expires.
func TestJoinCreatesAKubeadmBootstrapToken(t *testing.T) {
	v := serverVersion(t)
	kubeadmCluster(t, v)
	now := time.Now()
	var out bytes.Buffer
	res, err := Run(context.Background(), env.Config, Options{Node: "byo-win-1", WindowsVersion: infrav1.WindowsServer2022, PrintScript: true, Now: func() time.Time { return now }}, nil, &out)
	if err != nil {
		t.Fatalf("join: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(bootstrapapi.BootstrapTokenPattern).MatchString(res.Plan.Token) {
		t.Fatalf("token %q is not of kubeadm's form [a-z0-9]{6}.[a-z0-9]{16}", res.Plan.Token)
	}
	id, _, _ := strings.Cut(res.Plan.Token, ".")
	sec, err := clientset(t).CoreV1().Secrets(metav1.NamespaceSystem).Get(context.Background(), "bootstrap-token-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = clientset(t).CoreV1().Secrets(metav1.NamespaceSystem).Delete(context.Background(), sec.Name, metav1.DeleteOptions{})
	})
	if sec.Type != corev1.SecretTypeBootstrapToken {
		t.Errorf("Secret type %q, want %q", sec.Type, corev1.SecretTypeBootstrapToken)
	}
	exp, err := time.Parse(time.RFC3339, string(sec.Data["expiration"]))
	if err != nil || exp.Sub(now) > DefaultTokenTTL || exp.Sub(now) < DefaultTokenTTL-time.Second {
		t.Errorf("expiration %q (%v), want 24h after %s as kubeadm's default", sec.Data["expiration"], err, now.UTC().Format(time.RFC3339))
	}
	for k, want := range map[string]string{"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true", "auth-extra-groups": NodeTokenGroup} {
		if got := string(sec.Data[k]); got != want {
			t.Errorf("Secret %s = %q, want %q", k, got, want)
		}
	}
	review, err := whoAmI(t, res.Plan.Token)
	if err != nil {
		t.Fatalf("the API server does not accept the token: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != "system:bootstrap:"+id {
		t.Errorf("token authenticates as %q, want system:bootstrap:%s", got, id)
	}
	if !strings.Contains(strings.Join(review.Status.UserInfo.Groups, ","), NodeTokenGroup) {
		t.Errorf("token's groups %v lack %s, which kubeadm's bootstrap bindings name", review.Status.UserInfo.Groups, NodeTokenGroup)
	}
	want, _ := CAHash(env.Config.CAData)
	if res.Plan.CAHash != want || !strings.Contains(res.Script, "--discovery-token-ca-cert-hash '"+want+"'") {
		t.Errorf("script's CA hash: plan %q, want %q", res.Plan.CAHash, want)
	}
	if !strings.Contains(res.Script, "[DateTime]::Parse('"+string(sec.Data["expiration"])+"')") {
		t.Errorf("the script's preflight does not check the token's expiry %s", sec.Data["expiration"])
	}
	if !strings.Contains(res.Script, "--token '"+res.Plan.Token+"'") || !strings.Contains(res.Script, "--cri-socket 'npipe:////./pipe/containerd-containerd'") {
		t.Errorf("the script's kubeadm join lacks the token or containerd's pipe:\n%s", res.Script)
	}

	// A token whose expiration has passed is refused, as the node's
	// kubeadm join would find it.
	old, err := CreateToken(context.Background(), clientset(t), time.Second, now.Add(-time.Hour), "old")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = clientset(t).CoreV1().Secrets(metav1.NamespaceSystem).Delete(context.Background(), "bootstrap-token-"+old.ID, metav1.DeleteOptions{})
	})
	if _, err := whoAmI(t, old.String()); err == nil {
		t.Error("the API server accepted an expired bootstrap token")
	}
}

// Each cluster-side preflight names what breaks a Windows join, and a
// failed preflight creates no token.
func TestPreflightNamesEachCause(t *testing.T) {
	ctx := context.Background()
	v := serverVersion(t)
	objs := kubeadmCluster(t, v)
	cs := clientset(t)
	inspect := func() *Cluster {
		t.Helper()
		c, err := Inspect(ctx, cs, env.Client)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	good := Machine{Name: "byo-win-1", WindowsVersion: infrav1.WindowsServer2022}
	if fs := Preflight(inspect(), good); Failed(fs) {
		t.Fatalf("a kubeadm cluster with Windows-ready Calico fails preflight: %v", fs)
	}

	mustFind(t, Preflight(inspect(), Machine{Name: "byo-windows-0001", WindowsVersion: infrav1.WindowsServer2022}), "hostname", "16 characters")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "byo-win-1"}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	mustFind(t, Preflight(inspect(), good), "hostname", "already in the cluster")
	if err := env.Client.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	mustFind(t, Preflight(inspect(), Machine{Name: "w", WindowsVersion: infrav1.WindowsServer2019}), "windows-version", "not supported")

	ipam := objs[len(objs)-1].(*unstructured.Unstructured)
	if err := unstructured.SetNestedField(ipam.Object, false, "spec", "strictAffinity"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(ctx, ipam); err != nil {
		t.Fatal(err)
	}
	mustFind(t, Preflight(inspect(), good), "windows-cni", "strictAffinity false")

	stale, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "kube-proxy-windows", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale.Spec.Template.Spec.Containers[0].Image = "sigwindowstools/kube-proxy:v1.25.3-calico-hostprocess"
	if _, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Update(ctx, stale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustFind(t, Preflight(inspect(), good), "kube-proxy-windows", "not the cluster's version "+v)

	if err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Delete(ctx, "cluster-info", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err = Run(ctx, env.Config, Options{Node: "byo-win-1", WindowsVersion: infrav1.WindowsServer2022, PrintScript: true}, nil, &out)
	var pe *PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("join without cluster-info: %v, want a preflight error", err)
	}
	mustFind(t, pe.Findings, "cluster-info", "cannot discover")
	secrets, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken)})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("a failed preflight left %d bootstrap tokens", len(secrets.Items))
	}
}

// A Flannel cluster passes only with Windows' VXLAN numbers.
func TestPreflightFlannelVXLAN(t *testing.T) {
	ctx := context.Background()
	c := &Cluster{GitVersion: "v1.34.2", Nodes: map[string]bool{}}
	cs := clientset(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-flannel-cfg"},
		Data: map[string]string{"net-conf.json": `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`}}
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Delete(ctx, cm.Name, metav1.DeleteOptions{})
	})
	if err := flannelProblems(ctx, cs, &c.CNI); err != nil {
		t.Fatal(err)
	}
	if len(c.CNI.Problems) != 1 || !strings.Contains(c.CNI.Problems[0], "VNI 0 and Port 0") {
		t.Fatalf("flannel with its Linux defaults: %v, want the VNI/port problem", c.CNI.Problems)
	}
	cm.Data["net-conf.json"] = `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}`
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.CNI.Problems = nil
	if err := flannelProblems(ctx, cs, &c.CNI); err != nil || len(c.CNI.Problems) != 0 {
		t.Fatalf("flannel with VNI 4096 and port 4789: %v %v", c.CNI.Problems, err)
	}
}

// The CA hash is the SHA-256 of the certificate's public key, as kubeadm
// pins it, computed here the other way: from the parsed key.
func TestCAHashPinsThePublicKey(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	pemData := append(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("not a cert")}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	got, err := CAHash(pemData)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:" + hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("CAHash = %s, want %s", got, want)
	}
	if _, err := CAHash([]byte("junk")); err == nil {
		t.Fatal("CAHash of no certificate succeeded")
	}
}

// A cluster without kube-proxy-windows and the CNI's Windows DaemonSet
// fails the preflight with a fix naming --apply-addons, and nothing is
// applied; with the flag the join applies them, server-side under its
// field manager, at the cluster's versions, and goes on.
func TestJoinAppliesMissingAddonsOnlyWithTheFlag(t *testing.T) {
	ctx := context.Background()
	v := serverVersion(t)
	objs := kubeadmCluster(t, v)
	cs := clientset(t)
	for _, name := range []string{"kube-proxy-windows", "calico-node-windows"} {
		if err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range []string{"cni-config-windows", "calico-static-rules", infrav1.ServicesEndpointConfigMap} {
			_ = cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Delete(ctx, name, metav1.DeleteOptions{})
		}
		secrets, _ := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken)})
		for _, s := range secrets.Items {
			_ = cs.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	})
	o := Options{Node: "byo-win-2", WindowsVersion: infrav1.WindowsServer2022, PrintScript: true}
	var out bytes.Buffer
	_, err := Run(ctx, env.Config, o, nil, &out)
	var pe *PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("join of a cluster without Windows add-ons: %v, want a preflight error\n%s", err, out.String())
	}
	for _, check := range []string{"kube-proxy-windows", "windows-cni"} {
		mustFind(t, pe.Findings, check, "")
		for _, f := range pe.Findings {
			if f.Check == check && !strings.Contains(f.Fix, "--apply-addons") {
				t.Errorf("%s finding's fix does not name --apply-addons: %s", check, f)
			}
		}
	}
	dss, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ds := range dss.Items {
		if strings.Contains(ds.Name, "windows") {
			t.Errorf("a join without --apply-addons created DaemonSet %s", ds.Name)
		}
	}

	o.ApplyAddons = true
	out.Reset()
	res, err := Run(ctx, env.Config, o, nil, &out)
	if err != nil {
		t.Fatalf("join --apply-addons: %v\n%s", err, out.String())
	}
	if !strings.Contains(res.Script, "kubeadm.exe join") {
		t.Errorf("join --apply-addons rendered no join script")
	}
	linuxCalico := objs[3].(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Image
	want := map[string]string{
		"kube-proxy-windows":  flavors.KubeProxyWindowsImage(mustVersion(t, v)),
		"calico-node-windows": "docker.io/calico/node-windows:" + imageTag(linuxCalico),
	}
	for name, image := range want {
		ds, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after join --apply-addons: %v", err)
		}
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != image {
			t.Errorf("%s runs %s, want %s", name, got, image)
		}
		applied := false
		for _, mf := range ds.ManagedFields {
			applied = applied || (mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply)
		}
		if !applied {
			t.Errorf("%s was not server-side applied by %s: %+v", name, FieldManager, ds.ManagedFields)
		}
	}
	ep, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, infrav1.ServicesEndpointConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("calico-node-windows reads %s, which the join did not create: %v", infrav1.ServicesEndpointConfigMap, err)
	}
	if host := ep.Data["KUBERNETES_SERVICE_HOST"] + ":" + ep.Data["KUBERNETES_SERVICE_PORT"]; host != res.Plan.APIServer {
		t.Errorf("%s says %s, want the API server %s", infrav1.ServicesEndpointConfigMap, host, res.Plan.APIServer)
	}
}

func mustVersion(t *testing.T, v string) images.Version {
	t.Helper()
	pv, err := images.ParseVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	return pv
}
