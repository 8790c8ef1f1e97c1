package controlplane

import (
	"net"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/winkube/winkube/emulator/machines/bootdata"
)

type component struct {
	name string
	args []string
	// probe is where kubeadm's probes ask the component (scheme, port,
	// liveness, readiness and startup paths; "" for none).
	probe probeSpec
	// annotations kubeadm puts on the static pod, which Cluster API and
	// kubeadm read back.
	annotations map[string]string
}

func toArgs(a bootdata.Args) []arg {
	out := make([]arg, 0, len(a))
	for _, x := range a {
		out = append(out, arg{x.Name, x.Value})
	}
	return out
}

// components are the four control-plane processes with the flags kubeadm
// writes into their static pod manifests, on the VM's host address.
func (cp *ControlPlane) components() []component {
	cc := cp.cluster
	host := cp.cfg.Host.String()
	pki := filepath.Join(cp.Root, "etc/kubernetes/pki")
	kdir := filepath.Join(cp.Root, "etc/kubernetes")
	p := func(f string) string { return filepath.Join(pki, f) }
	name := cp.cfg.NodeName
	url := func(port int) string { return "https://" + net.JoinHostPort(host, strconv.Itoa(port)) }
	svc := cc.Networking.ServiceSubnet
	if svc == "" {
		svc = "10.96.0.0/12"
	}
	var etcdExtra bootdata.Args
	if cc.Etcd.Local != nil {
		etcdExtra = cc.Etcd.Local.ExtraArgs
	}
	etcd := component{name: "etcd", args: flags(map[string]string{
		"name": name, "data-dir": filepath.Join(cp.Root, "var/lib/etcd"),
		"listen-client-urls": url(2379), "advertise-client-urls": url(2379),
		"listen-peer-urls": url(2380), "initial-advertise-peer-urls": url(2380),
		"initial-cluster": initialCluster(cp, name+"="+url(2380)), "initial-cluster-state": clusterState(cp), "listen-metrics-urls": "http://" + net.JoinHostPort(host, "2381"),
		"cert-file": p("etcd/server.crt"), "key-file": p("etcd/server.key"), "client-cert-auth": "true", "trusted-ca-file": p("etcd/ca.crt"),
		"peer-cert-file": p("etcd/peer.crt"), "peer-key-file": p("etcd/peer.key"), "peer-client-cert-auth": "true", "peer-trusted-ca-file": p("etcd/ca.crt"),
		"snapshot-count": "10000", "experimental-initial-corrupt-check": "true", "watch-progress-notify-interval": "5s",
	}, toArgs(etcdExtra)), annotations: map[string]string{"kubeadm.kubernetes.io/etcd.advertise-client-urls": url(2379)},
		probe: probeSpec{scheme: corev1.URISchemeHTTP, port: 2381, live: "/livez", start: "/readyz"}}
	apiDefaults := map[string]string{
		"advertise-address": host, "bind-address": host, "secure-port": strconv.Itoa(apiPort),
		"allow-privileged": "true", "authorization-mode": "Node,RBAC", "client-ca-file": p("ca.crt"),
		"enable-admission-plugins": "NodeRestriction", "enable-bootstrap-token-auth": "true",
		"etcd-cafile": p("etcd/ca.crt"), "etcd-certfile": p("apiserver-etcd-client.crt"), "etcd-keyfile": p("apiserver-etcd-client.key"), "etcd-servers": url(2379),
		"kubelet-client-certificate": p("apiserver-kubelet-client.crt"), "kubelet-client-key": p("apiserver-kubelet-client.key"),
		"kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
		"proxy-client-cert-file":          p("front-proxy-client.crt"), "proxy-client-key-file": p("front-proxy-client.key"),
		"requestheader-allowed-names": "front-proxy-client", "requestheader-client-ca-file": p("front-proxy-ca.crt"),
		"requestheader-extra-headers-prefix": "X-Remote-Extra-", "requestheader-group-headers": "X-Remote-Group", "requestheader-username-headers": "X-Remote-User",
		"service-account-issuer": "https://kubernetes.default.svc.cluster.local", "service-account-key-file": p("sa.pub"), "service-account-signing-key-file": p("sa.key"),
		"service-cluster-ip-range": svc, "tls-cert-file": p("apiserver.crt"), "tls-private-key-file": p("apiserver.key"),
	}
	if cp.egress != nil {
		// Not a kubeadm default: the machine's own network namespace for
		// the API server's connections into the cluster (package egress).
		apiDefaults["egress-selector-config-file"] = filepath.Join(cp.Root, egressConfigFile)
	}
	api := component{name: "kube-apiserver", args: flags(apiDefaults, toArgs(cc.APIServer.ExtraArgs)), annotations: map[string]string{"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": net.JoinHostPort(host, strconv.Itoa(apiPort))},
		probe: probeSpec{scheme: corev1.URISchemeHTTPS, port: apiPort, live: "/livez", ready: "/readyz", start: "/livez"}}
	kcmDefaults := map[string]string{
		"authentication-kubeconfig": filepath.Join(kdir, "controller-manager.conf"), "authorization-kubeconfig": filepath.Join(kdir, "controller-manager.conf"),
		"kubeconfig": filepath.Join(kdir, "controller-manager.conf"), "bind-address": host, "client-ca-file": p("ca.crt"),
		"cluster-name": cc.ClusterName, "cluster-signing-cert-file": p("ca.crt"), "cluster-signing-key-file": p("ca.key"),
		"controllers": "*,bootstrapsigner,tokencleaner", "leader-elect": "true", "requestheader-client-ca-file": p("front-proxy-ca.crt"),
		"root-ca-file": p("ca.crt"), "service-account-private-key-file": p("sa.key"), "service-cluster-ip-range": svc, "use-service-account-credentials": "true",
	}
	if cc.Networking.PodSubnet != "" {
		kcmDefaults["allocate-node-cidrs"], kcmDefaults["cluster-cidr"] = "true", cc.Networking.PodSubnet
	}
	kcm := component{name: "kube-controller-manager", args: flags(kcmDefaults, toArgs(cc.ControllerManager.ExtraArgs)),
		probe: probeSpec{scheme: corev1.URISchemeHTTPS, port: 10257, live: "/healthz", start: "/healthz"}}
	sched := component{name: "kube-scheduler", args: flags(map[string]string{
		"authentication-kubeconfig": filepath.Join(kdir, "scheduler.conf"), "authorization-kubeconfig": filepath.Join(kdir, "scheduler.conf"),
		"kubeconfig": filepath.Join(kdir, "scheduler.conf"), "bind-address": host, "leader-elect": "true",
	}, toArgs(cc.Scheduler.ExtraArgs)), probe: probeSpec{scheme: corev1.URISchemeHTTPS, port: 10259, live: "/livez", ready: "/readyz", start: "/livez"}}
	return []component{etcd, api, kcm, sched}
}

// pod is the component's static pod as kubeadm would write it, for the
// kubelet to mirror.
func (c component) pod(_ Config, cp *ControlPlane) *corev1.Pod {
	version := cp.cluster.KubernetesVersion
	image := "registry.k8s.io/" + c.name + ":" + version
	if c.name == "etcd" {
		image = "registry.k8s.io/etcd"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.name, Namespace: metav1.NamespaceSystem, Annotations: c.annotations,
			Labels: map[string]string{"component": c.name, "tier": "control-plane"},
		},
		Spec: corev1.PodSpec{
			HostNetwork: true, PriorityClassName: "system-node-critical",
			// FallbackToLogsOnError, so that a crash shows the process's
			// last log lines in the container's terminated state.
			Containers: []corev1.Container{c.probe.apply(corev1.Container{Name: c.name, Image: image, Command: append([]string{c.name}, c.args...),
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}, cp.cfg.Host.String())},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
	}
}

type probeSpec struct {
	scheme             corev1.URIScheme
	port               int32
	live, ready, start string
}

// apply gives a container kubeadm's probes, with kubeadm's timings, at
// the VM's host address, where the component listens here (kubeadm's own
// use 127.0.0.1 for some; the host address is this VM's).
func (p probeSpec) apply(c corev1.Container, host string) corev1.Container {
	get := func(path string) corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: host, Path: path, Port: intstr.FromInt32(p.port), Scheme: p.scheme}}
	}
	if p.live != "" {
		c.LivenessProbe = &corev1.Probe{ProbeHandler: get(p.live), InitialDelaySeconds: 10, TimeoutSeconds: 15, PeriodSeconds: 10, FailureThreshold: 8}
	}
	if p.ready != "" {
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: get(p.ready), TimeoutSeconds: 15, PeriodSeconds: 1, FailureThreshold: 3}
	}
	if p.start != "" {
		c.StartupProbe = &corev1.Probe{ProbeHandler: get(p.start), InitialDelaySeconds: 10, TimeoutSeconds: 15, PeriodSeconds: 10, FailureThreshold: 24}
	}
	return c
}

func initialCluster(cp *ControlPlane, self string) string {
	if cp.initialCluster != "" {
		return cp.initialCluster
	}
	return self
}

func clusterState(cp *ControlPlane) string {
	if cp.initialCluster != "" {
		return "existing"
	}
	return "new"
}
