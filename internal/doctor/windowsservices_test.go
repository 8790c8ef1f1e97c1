package doctor

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func service(ns, name string, spec corev1.ServiceSpec) *corev1.Service {
	if len(spec.Ports) == 0 {
		spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
	}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func TestWindowsServicesLocalTrafficWithoutDSR(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "winsvc-dsr")
	c.linuxNode("lin-1")
	local := service(ns, "web", corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Selector: map[string]string{"app": "web"}})
	c.create(local, nil)
	expect(t, "no Windows nodes", WindowsServices(c.state()), 0, Warning)

	c.node("win-dsr", "windows", "10.0.17763", "10.0.17763.1817", nil)
	fs := WindowsServices(c.state())
	// Only the information that no Windows node reaches its own NodePort.
	expect(t, "DSR build", fs, 1, Info, "win-dsr", "do not reach their own NodePorts", ns+"/web (")

	c.node("win-old", "windows", "10.0.17763", "10.0.17763.1339", nil)
	fs = WindowsServices(c.state())
	expect(t, "a build without DSR", fs[:1], 1, Warning, "Service/"+ns+"/web", "externalTrafficPolicy Local", "win-old (10.0.17763.1339)", "localTrafficDSR=false", "10.0.17763.1432")
	if len(fs) != 2 || fs[1].Severity != Info {
		t.Fatalf("findings %+v", fs)
	}
	for _, f := range fs[:1] {
		if strings.Contains(f.Message, "win-dsr") {
			t.Errorf("the DSR node is named: %s", f.Message)
		}
	}

	c.update(local, func() { local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster })
	expect(t, "Cluster policy", WindowsServices(c.state()), 1, Info)
}

func TestWindowsServicesSessionAffinity(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "winsvc-affinity")
	c.windowsNode("win-2022")
	sticky := service(ns, "sticky", corev1.ServiceSpec{Selector: map[string]string{"app": "s"}, SessionAffinity: corev1.ServiceAffinityClientIP})
	c.create(sticky, nil)
	// The API server's default timeout, on Windows Server 2022: nothing to say.
	expect(t, "default timeout on 2022", WindowsServices(c.state()), 0, Warning)

	c.update(sticky, func() {
		sticky.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
	})
	expect(t, "timeoutSeconds on 2022", WindowsServices(c.state()), 1, Warning, "timeoutSeconds to 60", "win-2022", "no timeout")

	c.node("win-2019", "windows", "10.0.17763", "10.0.17763.6532", nil)
	fs := WindowsServices(c.state())
	expect(t, "2019 and 2022", fs, 2, Warning)
	expect(t, "2019", fs[:1], 1, Warning, "needs Windows Server 2022", "win-2019 (10.0.17763.6532)", "Session Affinity is not supported on this version of Windows")
	if strings.Contains(fs[0].Message, "win-2022") {
		t.Errorf("the 2022 node is said to lack affinity: %s", fs[0].Message)
	}
	expect(t, "2022", fs[1:], 1, Warning, "timeoutSeconds", "win-2022")

	c.update(sticky, func() {
		sticky.Spec.SessionAffinity = corev1.ServiceAffinityNone
		sticky.Spec.SessionAffinityConfig = nil
	})
	expect(t, "no affinity", WindowsServices(c.state()), 0, Warning)
}

func TestWindowsServicesIPv6OnOverlay(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "winsvc-ipv6")
	c.windowsNode("win-1")
	// The test's API server is IPv4 only: the IPv6 and dual-stack Services
	// are added to what it read.
	withServices := func() *State {
		s := c.state()
		s.Services = append(s.Services,
			*service(ns, "v6", corev1.ServiceSpec{ClusterIP: "fd00:96::10", ClusterIPs: []string{"fd00:96::10"}, IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}}),
			*service(ns, "dual", corev1.ServiceSpec{ClusterIP: "10.96.0.20", ClusterIPs: []string{"10.96.0.20", "fd00:96::20"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}}),
			*service(ns, "v4", corev1.ServiceSpec{ClusterIP: "10.96.0.30", ClusterIPs: []string{"10.96.0.30"}}))
		return s
	}
	expect(t, "no overlay known", WindowsServices(withServices()), 0, Error)

	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-flannel-cfg"},
		Data: map[string]string{"net-conf.json": `{"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}`}}
	c.create(cfg, nil)
	expect(t, "host-gw", WindowsServices(withServices()), 0, Error)

	c.update(cfg, func() {
		cfg.Data["net-conf.json"] = `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 4096, "Port": 4789}}`
	})
	fs := WindowsServices(withServices())
	if len(fs) != 2 {
		t.Fatalf("findings %+v", fs)
	}
	expect(t, "IPv6 only", fs[:1], 1, Error, "Service/"+ns+"/v6", "IPv6 only", "win-1", "Winoverlay does not support dual-stack", "net-conf.json Backend.Type vxlan", "not programmed")
	expect(t, "dual-stack", fs[1:], 1, Warning, "Service/"+ns+"/dual", "only its IPv4 ClusterIP")
}
