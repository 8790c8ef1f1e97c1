package machines_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/emulator/machines/join"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// seedsIIS reads the IIS Deployment of examples/iis.yaml.
func seedsIIS(t *testing.T) *appsv1.Deployment {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "examples", "iis.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		d := &appsv1.Deployment{}
		if err := dec.Decode(d); err != nil {
			t.Fatalf("examples/iis.yaml has no Deployment: %v", err)
		}
		if d.Kind == "Deployment" {
			return d
		}
	}
}

// podOf waits until the pods selected by app have a status the kubelet
// wrote, and returns the first.
func (m *mixed) podOf(t *testing.T, ctx context.Context, app string, done func(*corev1.Pod) string) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	poll.Until(t, 2*time.Minute, func() string {
		pods, err := m.workload.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return err.Error()
		}
		if len(pods.Items) == 0 {
			return "no pod of " + app
		}
		got = &pods.Items[0]
		return done(got)
	})
	return got
}

func waitingReason(p *corev1.Pod) (string, string) {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil && c.State.Waiting.Reason != "ContainerCreating" {
			return c.State.Waiting.Reason, c.State.Waiting.Message
		}
	}
	return "", ""
}

func running(node string) func(*corev1.Pod) string {
	return func(p *corev1.Pod) string {
		if p.Status.Phase != corev1.PodRunning {
			r, msg := waitingReason(p)
			return p.Name + " is " + string(p.Status.Phase) + " " + r + " " + msg
		}
		if p.Spec.NodeName != node {
			return p.Name + " runs on " + p.Spec.NodeName + ", not " + node
		}
		return ""
	}
}

func failing(reason, message string) func(*corev1.Pod) string {
	return func(p *corev1.Pod) string {
		r, msg := waitingReason(p)
		if r != reason || !strings.Contains(msg, message) {
			return p.Name + " waits for " + r + " (" + msg + "), want " + reason
		}
		return ""
	}
}

func (m *mixed) workloads(t *testing.T, ctx context.Context, winNode, linuxNode string) {
	// The seeds' IIS Deployment with the image of the node's build runs on
	// the Windows node, with an address from its pod CIDR.
	iis := seedsIIS(t)
	iis.Namespace = "default"
	if iis.Spec.Template.Spec.Containers[0].Image != "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022" || iis.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "windows" {
		t.Fatalf("examples/iis.yaml changed: %+v", iis.Spec.Template.Spec)
	}
	if err := m.wc.Create(ctx, iis); err != nil {
		t.Fatal(err)
	}
	p := m.podOf(t, ctx, "iis-2022", running(winNode))
	node, err := m.workload.CoreV1().Nodes().Get(ctx, winNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cidr, err := netip.ParsePrefix(node.Spec.PodCIDR); err != nil || !cidr.Contains(netip.MustParseAddr(p.Status.PodIP)) {
		t.Errorf("IIS pod IP %s is not in node %s's pod CIDR %q", p.Status.PodIP, winNode, node.Spec.PodCIDR)
	}

	// The same pods with the 2019 image: Windows refuses a container of
	// another build.
	iis19 := seedsIIS(t)
	iis19.Name, iis19.Namespace = "iis-1809", "default"
	iis19.Spec.Selector.MatchLabels = map[string]string{"app": "iis-1809"}
	iis19.Spec.Template.Labels = map[string]string{"app": "iis-1809"}
	iis19.Spec.Template.Spec.Containers[0].Image = "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"
	if err := m.wc.Create(ctx, iis19); err != nil {
		t.Fatal(err)
	}
	m.podOf(t, ctx, "iis-1809", failing("CreateContainerError", "The container operating system does not match the host operating system"))

	// A Linux nginx runs on the Linux node.
	labels := map[string]string{"app": "nginx"}
	nginx := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "nginx", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
			Containers:   []corev1.Container{{Name: "nginx", Image: "docker.io/library/nginx:1.27"}},
		}},
	}}
	if err := m.wc.Create(ctx, nginx); err != nil {
		t.Fatal(err)
	}
	m.podOf(t, ctx, "nginx", running(linuxNode))

	// A DaemonSet without a nodeSelector lands on both workers; its
	// Windows pod cannot pull a Linux-only image.
	dsLabels := map[string]string{"app": "everywhere"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "everywhere", Namespace: "default"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: dsLabels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "nginx", Image: "docker.io/library/nginx:1.27"}},
		}},
	}}
	if err := m.wc.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		pods, err := m.workload.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=everywhere"})
		if err != nil {
			return err.Error()
		}
		var linuxOK, winFails bool
		for _, p := range pods.Items {
			r, msg := waitingReason(&p)
			linuxOK = linuxOK || (p.Spec.NodeName == linuxNode && p.Status.Phase == corev1.PodRunning)
			winFails = winFails || (p.Spec.NodeName == winNode && (r == "ErrImagePull" || r == "ImagePullBackOff") && strings.Contains(msg, "no match for platform in manifest"))
		}
		if !linuxOK || !winFails {
			return "DaemonSet pods: Linux running " + boolStr(linuxOK) + ", Windows failing to pull " + boolStr(winFails)
		}
		return ""
	})

	// An ordinary Windows pod asking for the host network runs in a pod
	// network all the same (containerd shares the host's network only
	// with HostProcess sandboxes), while its status reports the node's IP
	// as a host-network pod's does.
	hostNet := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "win-hostnet", Namespace: "default", Labels: map[string]string{"app": "win-hostnet"}}, Spec: corev1.PodSpec{
		HostNetwork: true, NodeName: winNode,
		Containers: []corev1.Container{{Name: "c", Image: "mcr.microsoft.com/windows/servercore:ltsc2022"}},
	}}
	if err := m.wc.Create(ctx, hostNet); err != nil {
		t.Fatal(err)
	}
	m.podOf(t, ctx, "win-hostnet", func(p *corev1.Pod) string {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.Status.PodIP != p.Status.HostIP {
			return fmt.Sprintf("host-network Windows pod is %s, pod IP %q, host IP %q: want Running with the node's IP", p.Status.Phase, p.Status.PodIP, p.Status.HostIP)
		}
		return ""
	})

	// The seeds' LoadBalancer Service gets a public IP from the cloud; the
	// IP goes when the Service does.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "iis", Namespace: "default"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "iis-2022"},
		Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}},
	}}
	if err := m.wc.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	var ip string
	poll.Until(t, time.Minute, func() string {
		if err := m.wc.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return err.Error()
		}
		if len(svc.Status.LoadBalancer.Ingress) == 0 {
			return "Service iis has no external IP"
		}
		ip = svc.Status.LoadBalancer.Ingress[0].IP
		return ""
	})
	if a, err := netip.ParseAddr(ip); err != nil || !publicPool.Contains(a) {
		t.Errorf("external IP %q is not from the emulator's public pool", ip)
	}
	// Every node's kube-proxy serves the Service's NodePort, forwarding to
	// the IIS pod, whose simulated container answers with its page.
	for _, name := range []string{winNode, linuxNode} {
		n, err := m.workload.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + net.JoinHostPort(n.Status.Addresses[0].Address, strconv.Itoa(int(svc.Spec.Ports[0].NodePort))) + "/iisstart.htm"
		poll.Until(t, time.Minute, func() string {
			cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := cl.Get(url)
			if err != nil {
				return "NodePort of node " + name + ": " + err.Error()
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.Header.Get("X-Winkube-Simulated") != "true" || resp.Header.Get("X-Winkube-Pod") != "default/"+p.Name || !strings.Contains(string(body), winNode) {
				return fmt.Sprintf("NodePort of node %s answers %d %v %q", name, resp.StatusCode, resp.Header, body)
			}
			return ""
		})
	}
	// A Windows node does not reach its own NodePort, by its host address
	// or its VNet address (the Kubernetes docs' Windows networking
	// limitations); the Linux node reaches the Windows node's.
	win, err := m.workload.CoreV1().Nodes().Get(ctx, winNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	winHost := win.Status.Addresses[0].Address
	winHostAddr, err := netip.ParseAddr(winHost)
	if err != nil {
		t.Fatal(err)
	}
	winPrivate, ok := hn.Private(winHostAddr)
	if !ok {
		t.Fatalf("no VNet address for node %s's host address %s", winNode, winHost)
	}
	nodePort := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	for _, a := range []string{winHost, winPrivate} {
		if c, err := rt.DialFromNode(ctx, winNode, net.JoinHostPort(a, nodePort)); err == nil || !strings.Contains(err.Error(), "cannot reach its own NodePorts") {
			if c != nil {
				c.Close()
			}
			t.Errorf("Windows node %s dialing its own NodePort at %s: %v", winNode, a, err)
		}
	}
	if c, err := rt.DialFromNode(ctx, linuxNode, net.JoinHostPort(winPrivate, nodePort)); err != nil {
		t.Errorf("the Linux node dialing the Windows node's NodePort: %v", err)
	} else {
		c.Close()
	}
	// From the nodes themselves (their shells' curl), the Service's
	// ClusterIP reaches the pod through the node's kube-proxy; a Windows
	// Server 2022 host reaches Service VIPs.
	for _, name := range []string{linuxNode, winNode} {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return rt.DialFromNode(ctx, name, addr) }}}
		poll.Until(t, time.Minute, func() string {
			resp, err := cl.Get("http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/")
			if err != nil {
				return "ClusterIP from node " + name + ": " + err.Error()
			}
			resp.Body.Close()
			if resp.Header.Get("X-Winkube-Pod") != "default/"+p.Name {
				return fmt.Sprintf("ClusterIP from node %s answers %d %v", name, resp.StatusCode, resp.Header)
			}
			return ""
		})
	}
	pips, err := publicips.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	// cloud-provider-azure's names: the public IP <cluster>-a<uid>, on the
	// load balancer named after the controller manager's --cluster-name,
	// whose backend pool holds the workers (not the control plane).
	fe := ("a" + strings.ReplaceAll(string(svc.UID), "-", ""))[:32]
	name := "mixed-" + fe
	if pip, err := pips.Get(ctx, "mixed-rg", name); err != nil || pip == nil || *pip.Properties.IPAddress != ip {
		t.Fatalf("public IP %s in ARM: %v %v", name, pip, err)
	}
	lbs, err := loadbalancers.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		lb, err := lbs.Get(ctx, "mixed-rg", "mixed")
		if err != nil || lb == nil {
			return fmt.Sprintf("load balancer mixed: %v %v", lb, err)
		}
		var got []string
		for _, p := range lb.Properties.BackendAddressPools {
			for _, a := range p.Properties.LoadBalancerBackendAddresses {
				got = append(got, *a.Name)
			}
		}
		slices.Sort(got)
		nodes, err := m.workload.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		want := []string{}
		for _, n := range nodes.Items {
			if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; !cp {
				want = append(want, n.Name)
			}
		}
		slices.Sort(want)
		if len(lb.Properties.FrontendIPConfigurations) != 1 || *lb.Properties.FrontendIPConfigurations[0].Name != fe || !slices.Equal(got, want) {
			return fmt.Sprintf("load balancer mixed: frontends %d, backends %v, want the workers %v", len(lb.Properties.FrontendIPConfigurations), got, want)
		}
		return ""
	})
	// The seeds' last step, curl <EXTERNAL-IP>: the load balancer's rule
	// carries the connection to a worker's NodePort, whose kube-proxy
	// forwards it to the IIS pod.
	poll.Until(t, 2*time.Minute, func() string {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := cl.Get("http://" + net.JoinHostPort(ip, "80") + "/iisstart.htm")
		if err != nil {
			return "EXTERNAL-IP: " + err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Winkube-Pod") != "default/"+p.Name {
			return fmt.Sprintf("EXTERNAL-IP answers %d %v %q", resp.StatusCode, resp.Header, body)
		}
		return ""
	})
	if err := m.wc.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if pip, err := pips.Get(ctx, "mixed-rg", name); err != nil || pip != nil {
			return "public IP of the deleted Service still exists"
		}
		if lb, err := lbs.Get(ctx, "mixed-rg", "mixed"); err != nil || lb != nil {
			return "the load balancer outlives its last Service"
		}
		return ""
	})
}

func boolStr(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// etcdThroughPortForward reaches etcd the way Cluster API's kubeadm
// control-plane provider does: its own etcd client, dialing the etcd
// static pod through the API server's port-forward, with a client
// certificate from the cluster's etcd CA.
func (m *mixed) etcdThroughPortForward(t *testing.T, ctx context.Context, cpNode string) {
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: m.cluster.Namespace, Name: m.cluster.Name + "-etcd"}, s); err != nil {
		t.Fatal(err)
	}
	ca, err := certs.DecodeCertPEM(s.Data["tls.crt"])
	if err != nil {
		t.Fatalf("etcd CA secret: %v", err)
	}
	caKey, err := certs.DecodePrivateKeyPEM(s.Data["tls.key"])
	if err != nil {
		t.Fatalf("etcd CA secret: %v", err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf, err := (&certs.Config{CommonName: "capi-test-etcd-client", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}).NewSignedCert(key, ca, caKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	// As Cluster API does: the pod name it dials is in no certificate, so
	// the chain is checked without the host name.
	tlsCfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Raw}, PrivateKey: key}}, MinVersion: tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // verified below, as Cluster API does
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("etcd presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		},
	}
	c, err := etcd.NewClient(ctx, etcd.ClientConfiguration{
		Endpoint: "etcd-" + cpNode, TLSConfig: tlsCfg, DialTimeout: 10 * time.Second, CallTimeout: 10 * time.Second,
		Proxy: proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: workloadConfig(t, ctx, m.cluster), Port: 2379},
	})
	if err != nil {
		t.Fatalf("etcd through the API server's port-forward: %v", err)
	}
	defer c.Close()
	members, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 || members[0].Name != cpNode {
		t.Errorf("etcd members %+v, want the one member %s", members, cpNode)
	}
}

// alive reports whether a process still runs.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// joinRefusals: discovery refuses a wrong token secret and an unpinned CA,
// as kubeadm join does.
func (m *mixed) joinRefusals(t *testing.T, ctx context.Context, endpoint string) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	secrets, err := m.workload.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
	if err != nil || len(secrets.Items) == 0 {
		t.Fatalf("bootstrap tokens: %v", err)
	}
	id := string(secrets.Items[0].Data["token-id"])
	secret := string(secrets.Items[0].Data["token-secret"])
	ep := endpoint + ":6443"
	if _, err := join.Discover(ctx, join.Discovery{Endpoint: ep, Token: id + ".0000000000000000", CACertHashes: []string{"sha256:00"}}); err == nil || !strings.Contains(err.Error(), "failed to verify JWS signature") {
		t.Errorf("discovery with a wrong token secret: %v", err)
	}
	if _, err := join.Discover(ctx, join.Discovery{Endpoint: ep, Token: id + "." + secret, CACertHashes: []string{"sha256:" + strings.Repeat("ab", 32)}}); err == nil || !strings.Contains(err.Error(), "are pinned") {
		t.Errorf("discovery with a wrong CA pin: %v", err)
	}
	if _, err := join.Discover(ctx, join.Discovery{Endpoint: ep, Token: id + "." + secret}); err == nil || !strings.Contains(err.Error(), "unpinned") {
		t.Errorf("discovery without a CA pin: %v", err)
	}
}
