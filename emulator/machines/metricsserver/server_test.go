package metricsserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/metricsserver"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// frontProxy is a front-proxy CA and the aggregator's client certificate.
type frontProxy struct {
	pool   *x509.CertPool
	client tls.Certificate
	// other is a client certificate of another CA with the same name.
	other tls.Certificate
	// wrongName is of the front-proxy CA, named otherwise.
	wrongName tls.Certificate
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return ca, key
}

func clientCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func newFrontProxy(t *testing.T) frontProxy {
	ca, key := newCA(t)
	otherCA, otherKey := newCA(t)
	fp := frontProxy{pool: x509.NewCertPool(), client: clientCert(t, ca, key, "front-proxy-client"),
		other: clientCert(t, otherCA, otherKey, "front-proxy-client"), wrongName: clientCert(t, ca, key, "someone")}
	fp.pool.AddCert(ca)
	return fp
}

// world is an API server, a Linux and a Windows simulated node, and a
// metrics-server pod on the Linux node, served by the package under test
// through the kubelet's Serve hook.
type world struct {
	client kubernetes.Interface
	fp     frontProxy
	// msAddr is the metrics-server pod's host address and port.
	msAddr string
}

func startWorld(t *testing.T) *world {
	t.Helper()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	client := kubernetes.NewForConfigOrDie(env.Config)
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if err := reg.PushAll(context.Background(), registry.Catalog("v1.36.3", []string{"registry.k8s.io/kube-proxy:v1.36.3"})); err != nil {
		t.Fatal(err)
	}
	block, err := hostnet.ClaimBlock(-1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(block.Release)
	next := block.Hosts.Addr().Next()
	addr := func() netip.Addr { a := next; next = next.Next(); return a }
	w := &world{client: client, fp: newFrontProxy(t)}

	// Pod IPs of the Linux node are served at addresses of the block.
	var mu sync.Mutex
	podHosts := map[string]netip.Addr{}
	for i := 2; i < 8; i++ {
		podHosts[netip.AddrFrom4([4]byte{10, 244, 1, byte(i)}).String()] = addr()
	}
	podAddress := func(ip string) (netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		if a, ok := podHosts[ip]; ok {
			return a, nil
		}
		return netip.Addr{}, errors.New("no host address for " + ip)
	}
	// What the machine runtime does for the metrics-server image, with
	// the test's administrator credentials for the service account's.
	serve := func(ctx context.Context, pod *corev1.Pod, c corev1.Container, port int32) (http.Handler, *tls.Config) {
		if registry.Canonical(c.Image) != registry.Canonical(registry.MetricsServerImage) {
			return nil, nil
		}
		args, err := metricsserver.ParseArgs(append(append([]string{}, c.Command...), c.Args...))
		if err != nil || int(port) != args.SecurePort {
			t.Errorf("metrics-server args %v: %v", c.Args, err)
			return nil, nil
		}
		// Faster than the 10s the flag allows, so the test does not wait.
		args.MetricResolution = time.Second
		args.API, args.Log = rest.CopyConfig(env.Config), logr.Discard()
		args.RequestHeader = &metricsserver.RequestHeader{ClientCA: w.fp.pool, AllowedNames: []string{"front-proxy-client"},
			UsernameHeaders: []string{"X-Remote-User"}, GroupHeaders: []string{"X-Remote-Group"}, ExtraHeaderPrefixes: []string{"X-Remote-Extra-"}}
		srv, err := metricsserver.New(args.Options)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		go func() { _ = srv.Run(ctx) }()
		return srv, srv.TLSConfig()
	}
	start := func(name string, host kubelet.Host, cidr string, podAddr func(string) (netip.Addr, error)) {
		host.Arch, host.KubeletVersion = "amd64", "v1.36.3"
		k, err := kubelet.Start(context.Background(), kubelet.Config{
			NodeName: name, Client: client, ClientCA: env.KubeletClientCA, Address: addr(), Host: host, Images: reg,
			Labels:   map[string]string{"kubernetes.io/os": host.OS},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: host.OS, Architecture: "amd64", KubeletVersion: "v1.36.3"},
			Log:      logr.Discard(), NetworkConfigured: func() bool { return true },
			PodAddress: podAddr, Serve: serve,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
		if _, err := client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(`{"spec":{"podCIDR":"`+cidr+`","podCIDRs":["`+cidr+`"]}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start("ms-linux", kubelet.Host{OS: "linux"}, "10.244.1.0/24", podAddress)
	start("ms-windows", kubelet.Host{OS: "windows", Build: "10.0.20348"}, "10.244.2.0/24", nil)

	requests := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	// The upstream manifest's container (manifests/base/deployment.yaml
	// and the release image, v0.8.0), with --kubelet-insecure-tls: the
	// kubelets' serving certificates are self-signed.
	ms := w.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "metrics-server"}},
		Spec: corev1.PodSpec{NodeName: "ms-linux", Containers: []corev1.Container{{
			Name: "metrics-server", Image: registry.MetricsServerImage,
			Args:      []string{"--cert-dir=/tmp", "--secure-port=10250", "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname", "--kubelet-use-node-status-port", "--metric-resolution=15s", "--kubelet-insecure-tls"},
			Resources: requests("100m", "200Mi"),
			Ports:     []corev1.ContainerPort{{Name: "https", ContainerPort: 10250}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}},
				PeriodSeconds: 1},
		}}}})
	host, err := podAddress(ms.Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	w.msAddr = net.JoinHostPort(host.String(), "10250")
	w.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{kubelet.CPUUtilizationAnnotation: "180"}},
		Spec: corev1.PodSpec{NodeName: "ms-linux", Containers: []corev1.Container{{Name: "app", Image: "docker.io/library/busybox:1.36", Resources: requests("250m", "64Mi")}}}})
	w.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "iis", Namespace: "default", Labels: map[string]string{"app": "iis"}},
		Spec: corev1.PodSpec{NodeName: "ms-windows", OS: &corev1.PodOS{Name: corev1.Windows}, Containers: []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022", Resources: requests("500m", "256Mi")}}}})
	return w
}

func (w *world) run(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := w.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	poll.Until(t, time.Minute, func() string {
		p, err := w.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		got = p
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return "pod " + p.Name + " is " + string(p.Status.Phase)
		}
		return ""
	})
	return got
}

// get asks the metrics-server pod as the aggregator would when cert is
// the front-proxy client's; user names the user in X-Remote-User.
func (w *world) get(t *testing.T, cert *tls.Certificate, user, path string) (int, []byte) {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the upstream APIService sets insecureSkipTLSVerify
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+w.msAddr+path, nil)
	if user != "" {
		req.Header.Set("X-Remote-User", user)
		req.Header.Add("X-Remote-Group", "system:masters")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (w *world) decode(t *testing.T, path string, into any) {
	t.Helper()
	code, b := w.get(t, &w.fp.client, "kubernetes-admin", path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, b)
	}
}

func near(q resource.Quantity, want string, tolerance float64) bool {
	w := resource.MustParse(want)
	return float64(q.MilliValue()) >= float64(w.MilliValue())*(1-tolerance) && float64(q.MilliValue()) <= float64(w.MilliValue())*(1+tolerance)
}

// TestMetricsAPI runs the metrics-server pod on a simulated node and asks
// its API as the aggregator does.
func TestMetricsAPI(t *testing.T) {
	w := startWorld(t)
	ctx := context.Background()

	// Ready once it has two scrapes: the pod's readiness probe is the
	// upstream manifest's (HTTPS /readyz on the https port).
	poll.Until(t, time.Minute, func() string {
		p, err := w.client.CoreV1().Pods("kube-system").Get(ctx, "metrics-server", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return ""
			}
		}
		return "the metrics-server pod is not Ready yet"
	})

	t.Run("Discovery", func(t *testing.T) {
		var rl metav1.APIResourceList
		w.decode(t, "/apis/metrics.k8s.io/v1beta1", &rl)
		kinds := map[string]string{}
		for _, r := range rl.APIResources {
			kinds[r.Name] = r.Kind
		}
		if rl.GroupVersion != "metrics.k8s.io/v1beta1" || kinds["nodes"] != "NodeMetrics" || kinds["pods"] != "PodMetrics" {
			t.Errorf("discovery %+v", rl)
		}
	})

	t.Run("Nodes", func(t *testing.T) {
		var l metricsv1beta1.NodeMetricsList
		byName := map[string]metricsv1beta1.NodeMetrics{}
		// Until a scrape has seen every pod running on its node.
		poll.Until(t, 30*time.Second, func() string {
			w.decode(t, "/apis/metrics.k8s.io/v1beta1/nodes", &l)
			for _, n := range l.Items {
				byName[n.Name] = n
			}
			lin, win := byName["ms-linux"].Usage[corev1.ResourceMemory], byName["ms-windows"].Usage[corev1.ResourceMemory]
			if len(l.Items) != 2 || lin.Value() != (512+64+200)<<20 || win.Value() != (1536+256)<<20 {
				return fmt.Sprintf("nodes' metrics: %+v", l.Items)
			}
			return ""
		})
		win := byName["ms-windows"]
		// The Windows host's own 200m and 1.5Gi and the iis pod's request.
		if !near(win.Usage[corev1.ResourceCPU], "700m", 0.02) || win.Usage.Memory().Value() != (1536+256)<<20 {
			t.Errorf("Windows node usage %v", win.Usage)
		}
		if win.Window.Duration <= 0 || win.Timestamp.IsZero() || win.Labels["kubernetes.io/os"] != "windows" {
			t.Errorf("Windows node window %v timestamp %v labels %v", win.Window, win.Timestamp, win.Labels)
		}
		// 100m system, 450m web (180% of 250m), 100m metrics-server.
		if lin := byName["ms-linux"]; !near(lin.Usage[corev1.ResourceCPU], "650m", 0.02) || lin.Usage.Memory().Value() != (512+64+200)<<20 {
			t.Errorf("Linux node usage %v", lin.Usage)
		}
		var one metricsv1beta1.NodeMetrics
		w.decode(t, "/apis/metrics.k8s.io/v1beta1/nodes/ms-windows", &one)
		if one.Kind != "NodeMetrics" || one.Name != "ms-windows" {
			t.Errorf("node get: %+v", one)
		}
		if code, b := w.get(t, &w.fp.client, "kubernetes-admin", "/apis/metrics.k8s.io/v1beta1/nodes/nope"); code != http.StatusNotFound || !strings.Contains(string(b), `"reason":"NotFound"`) {
			t.Errorf("an unknown node: %d %s", code, b)
		}
	})

	t.Run("Pods", func(t *testing.T) {
		var l metricsv1beta1.PodMetricsList
		poll.Until(t, 30*time.Second, func() string {
			w.decode(t, "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb", &l)
			if len(l.Items) != 1 {
				return fmt.Sprintf("%d pods match app=web with metrics", len(l.Items))
			}
			return ""
		})
		web := l.Items[0]
		if web.Name != "web" || len(web.Containers) != 1 || !near(web.Containers[0].Usage[corev1.ResourceCPU], "450m", 0.02) || web.Containers[0].Usage.Memory().Value() != 64<<20 {
			t.Errorf("web's metrics %+v", web)
		}
		var all metricsv1beta1.PodMetricsList
		poll.Until(t, 30*time.Second, func() string {
			w.decode(t, "/apis/metrics.k8s.io/v1beta1/pods", &all)
			if len(all.Items) != 3 {
				return fmt.Sprintf("%d pods in all namespaces have metrics, want metrics-server, web and iis", len(all.Items))
			}
			return ""
		})
		var iis metricsv1beta1.PodMetrics
		w.decode(t, "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/iis", &iis)
		if iis.Kind != "PodMetrics" || len(iis.Containers) != 1 || !near(iis.Containers[0].Usage[corev1.ResourceCPU], "500m", 0.02) {
			t.Errorf("iis's metrics %+v", iis)
		}
		if code, b := w.get(t, &w.fp.client, "kubernetes-admin", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope"); code != http.StatusNotFound {
			t.Errorf("an unknown pod: %d %s", code, b)
		}
	})

	t.Run("OnlyTheAggregatorNamesUsers", func(t *testing.T) {
		const nodes = "/apis/metrics.k8s.io/v1beta1/nodes"
		// No certificate: anonymous, whom RBAC does not let read metrics.
		if code, b := w.get(t, nil, "kubernetes-admin", nodes); code != http.StatusForbidden || !strings.Contains(string(b), `User \"system:anonymous\" cannot list resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope`) {
			t.Errorf("without the front-proxy certificate: %d %s", code, b)
		}
		// A certificate of another CA is no front proxy either.
		if code, _ := w.get(t, &w.fp.other, "kubernetes-admin", nodes); code != http.StatusForbidden {
			t.Errorf("with another CA's certificate: %d", code)
		}
		// The front-proxy CA's, but not a name it allows.
		if code, b := w.get(t, &w.fp.wrongName, "kubernetes-admin", nodes); code != http.StatusUnauthorized {
			t.Errorf("with a certificate not in the allowed names: %d %s", code, b)
		}
		// Health needs no credentials.
		if code, b := w.get(t, nil, "", "/livez"); code != http.StatusOK || string(b) != "ok" {
			t.Errorf("/livez: %d %s", code, b)
		}
	})
}
