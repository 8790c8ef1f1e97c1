package doctor

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestUnselectedWorkloads(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "selection")
	c.linuxNode("lin-1")
	web := deployment(ns, "web", corev1.PodSpec{})
	c.create(web, nil)
	expect(t, "no Windows nodes", UnselectedWorkloads(c.state()), 0, Warning)

	win := c.windowsNode("win-1")
	expect(t, "Windows node", UnselectedWorkloads(c.state()), 1, Warning, "Deployment/selection/web", "win-1", "kubernetes.io/os")

	c.update(web, func() { web.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "linux"} })
	lin := deployment(ns, "by-affinity", corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"windows"}}}}}}}}})
	c.create(lin, nil)
	osField := daemonSet(ns, "by-os", corev1.PodSpec{OS: &corev1.PodOS{Name: corev1.Linux}})
	c.create(osField, nil)
	expect(t, "selected", UnselectedWorkloads(c.state()), 0, Warning)

	// A tainted Windows node keeps untolerating pods away; a DaemonSet that
	// tolerates everything still lands there.
	c.update(win, func() {
		win.Spec.Taints = []corev1.Taint{{Key: "os", Value: "windows", Effect: corev1.TaintEffectNoSchedule}}
	})
	c.create(deployment(ns, "no-toleration", corev1.PodSpec{}), nil)
	expect(t, "tainted Windows", UnselectedWorkloads(c.state()), 0, Warning)
	c.create(daemonSet(ns, "agent", corev1.PodSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}), nil)
	expect(t, "tolerating DaemonSet", UnselectedWorkloads(c.state()), 1, Warning, "DaemonSet/selection/agent")
}

func TestDaemonSetsOnWindows(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "daemons")
	c.linuxNode("lin-1")
	c.windowsNode("win-1")
	exporter := daemonSet(ns, "node-exporter", corev1.PodSpec{HostNetwork: true, HostPID: true, NodeSelector: map[string]string{corev1.LabelOSStable: "linux"}})
	c.create(exporter, nil)
	expect(t, "Linux-only", DaemonSetsOnWindows(c.state()), 0, Error)

	c.update(exporter, func() { exporter.Spec.Template.Spec.NodeSelector = nil })
	expect(t, "unselected", DaemonSetsOnWindows(c.state()), 1, Error, "DaemonSet/daemons/node-exporter", "hostNetwork", "hostPID", "kubernetes.io/os: linux")

	// A template Windows accepts, whose pod on the Windows node fails.
	logs := daemonSet(ns, "log-agent", corev1.PodSpec{})
	c.create(logs, nil)
	c.update(exporter, func() { exporter.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "linux"} })
	p := c.pod(ns, "log-agent-x1", "win-1", map[string]string{"app": "log-agent"}, corev1.PodSpec{}, true)
	c.update(p, func() {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "log-agent", UID: logs.UID}}
	})
	expect(t, "ready pod", DaemonSetsOnWindows(c.state()), 0, Error)
	c.update(p, func() {
		setReady(p, false, &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "no match for platform in manifest: not found"})
	})
	expect(t, "failing pod", DaemonSetsOnWindows(c.state()), 1, Error, "log-agent-x1 on win-1", "ErrImagePull")

	// A HostProcess DaemonSet whose containers are each HostProcess and
	// keep Linux settings the Windows kubelet drops (the Azure Disk CSI
	// chart's node DaemonSet) runs there.
	c.update(p, func() { setReady(p, true, nil) })
	hp := &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true), RunAsUserName: ptr.To(`NT AUTHORITY\SYSTEM`)}}
	c.create(daemonSet(ns, "csi-node-win", corev1.PodSpec{HostNetwork: true, NodeSelector: map[string]string{corev1.LabelOSStable: "windows"},
		Containers: []corev1.Container{{Name: "registrar", Image: "registrar", SecurityContext: hp}, {Name: "plugin", Image: "plugin", SecurityContext: hp}}}), nil)
	expect(t, "HostProcess containers", DaemonSetsOnWindows(c.state()), 0, Error)
}

func TestSecretsOnWindows(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "secrets")
	c.linuxNode("lin-1")
	c.windowsNode("win-1")
	vol := corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db-password"}}}
	c.pod(ns, "linux-app", "lin-1", nil, corev1.PodSpec{Volumes: []corev1.Volume{vol}}, true)
	c.pod(ns, "windows-app", "win-1", nil, corev1.PodSpec{}, true)
	expect(t, "no Windows secret", SecretsOnWindows(c.state()), 0, Warning)

	c.pod(ns, "windows-db", "win-1", nil, corev1.PodSpec{Volumes: []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "tls"}}}}}}}, vol}}, true)
	expect(t, "Windows secret", SecretsOnWindows(c.state()), 1, Warning, "Pod/secrets/windows-db", "tls, db-password", "clear text")
}

func TestWindowsNetworkingPods(t *testing.T) {
	c := newCluster(t)
	c.linuxNode("lin-1")
	c.windowsNode("win-1")
	hp := corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}}, HostNetwork: true}
	kp := c.pod("kube-system", "kube-proxy-windows-abcde", "win-1", map[string]string{"k8s-app": "kube-proxy"}, hp, true)
	cni := c.pod("kube-system", "calico-node-windows-fghij", "win-1", nil, hp, true)
	c.pod("kube-system", "kube-proxy-linux", "lin-1", nil, corev1.PodSpec{}, false) // Linux's own concern
	expect(t, "both ready", WindowsNetworkingPods(c.state()), 0, Error)

	c.update(kp, func() {
		setReady(kp, false, &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off restarting"})
	})
	expect(t, "kube-proxy failing", WindowsNetworkingPods(c.state()), 1, Error, "kube-proxy-windows-abcde", "CrashLoopBackOff")
	c.delete(cni)
	fs := WindowsNetworkingPods(c.state())
	expect(t, "CNI missing", only(fs, "windows-networking-pods"), 2, Error)
	expect(t, "CNI missing", fs[1:], 1, Error, "no CNI (Calico or flannel) pod", "cni-windows=calico")
}

func TestServiceSelectors(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "services")
	c.windowsNode("win-1")
	c.pod(ns, "iis-0", "win-1", map[string]string{"app": "iis"}, corev1.PodSpec{Containers: []corev1.Container{{Name: "iis", Image: "iis",
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}}, true)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iis"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "iis"},
		Ports: []corev1.ServicePort{{Name: "web", Port: 8080, TargetPort: intstr.FromString("http")}, {Name: "plain", Port: 80}}}}
	c.create(svc, nil)
	c.create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "external"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}, nil)
	expect(t, "healthy", ServiceSelectors(c.state()), 0, Warning)

	c.update(svc, func() {
		svc.Spec.Ports[0].TargetPort = intstr.FromString("https")
		svc.Spec.Ports[1].TargetPort = intstr.FromInt32(8081)
	})
	fs := ServiceSelectors(c.state())
	if len(fs) != 2 {
		t.Fatalf("want the named and the numbered port: %+v", fs)
	}
	expect(t, "named port", fs[:1], 1, Error, `"https"`, "no endpoints")
	expect(t, "numbered port", fs[1:], 1, Warning, "port 8081")

	c.update(svc, func() { svc.Spec.Selector = map[string]string{"app": "iis-typo"} })
	expect(t, "no pods", ServiceSelectors(c.state()), 1, Warning, "Service/services/iis", "selects no pod", "app=iis-typo")
}

func TestWindowsServiceBackends(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "backends")
	old := c.node("win-2019", "windows", "10.0.17763", "10.0.17763.2686", nil)
	c.windowsNode("win-2022")
	next := 0
	slice := func(name string, n int) {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4}
		for i := 0; i < n; i++ {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", next/250, next%250+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
			next++
		}
		c.create(s, nil)
	}
	slice("web-a", 40)
	slice("web-b", 24)
	expect(t, "64 backends", WindowsServiceBackends(c.state()), 0, Error)
	slice("web-c", 1)
	expect(t, "65 backends on an old 2019", WindowsServiceBackends(c.state()), 1, Error, "Service/backends/web", "65 backends", "10.0.17763.2686", "10.0.17763.2746")
	c.update(old, func() { old.Status.NodeInfo.KernelVersion = "10.0.17763.6054" })
	expect(t, "65 backends on an updated 2019", WindowsServiceBackends(c.state()), 0, Error)
}
