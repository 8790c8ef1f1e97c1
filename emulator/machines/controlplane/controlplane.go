// Package controlplane boots an emulated control-plane VM: real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler from bin/ on
// the VM's host address, with certificates the real kubeadm issues from
// the CA Cluster API wrote into the VM's cloud-init, and the API objects
// `kubeadm init` creates, made by kubeadm's own API-only init phases.
package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/egress"
)

// Config is one control-plane VM.
type Config struct {
	// Bin holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubeadm.
	Bin string
	// Versions holds the VersionedBinaries of other Kubernetes versions,
	// by version ("v1.35.4"): the machine runs those of its
	// ClusterConfiguration's kubernetesVersion, Bin's when none is listed.
	Versions map[string]string
	// Dir is the VM's disk: files from its custom data live under Dir/root.
	Dir      string
	NodeName string
	// PrivateIP is the VM's address in its VNet; Host the loopback address
	// standing for it, where the processes listen.
	PrivateIP string
	Host      netip.Addr
	Boot      *bootdata.BootData
	// Join, for a further control-plane machine, is the cluster it joins:
	// its API server and the bootstrap token's client, with which kubeadm
	// join reads the cluster's configuration.
	Join *Join
	// Progress receives a line per step.
	Progress func(string)
	// Dial connects as the machine's own processes do (a ClusterIP through
	// its kube-proxy, a pod IP through its routes, anything else
	// directly). When set, the API server's connections into the cluster
	// go through it (package egress); when nil they leave from the host.
	Dial egress.Dial
}

// Join is what a joining control-plane machine learned in discovery.
type Join struct {
	// Token reads kubeadm-config as the bootstrap token may.
	Token *rest.Config
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	cfg     Config
	cluster *bootdata.ClusterConfiguration
	// initialCluster is etcd's member list for a joining machine.
	initialCluster string
	procs          []*Process
	egress         *egress.Server
	// Root is the VM's filesystem root.
	Root string
	// SuperAdmin reaches the local API server as system:masters.
	SuperAdmin *rest.Config
	// Kubelet is the node's kubelet credentials (from kubeadm's
	// kubelet.conf), pointed at the local API server.
	Kubelet *rest.Config
	// StaticPods are the manifests the kubelet mirrors.
	StaticPods []*corev1.Pod
	// Endpoint is the control-plane endpoint (host:port) the load balancer
	// serves; APIServer is this VM's own host:port.
	Endpoint, APIServer string
}

const apiPort = 6443

func (c *Config) progress(s string) {
	if c.Progress != nil {
		c.Progress(s)
	}
}

// Start boots the control plane; on error everything started is stopped.
func Start(ctx context.Context, cfg Config) (cp *ControlPlane, err error) {
	b := cfg.Boot
	joining := b.Role == bootdata.JoinControlPlane
	if b.Role != bootdata.Init && !joining {
		return nil, fmt.Errorf("boot data role %s is not a control plane's", b.Role)
	}
	if joining && cfg.Join == nil {
		return nil, fmt.Errorf("a joining control plane needs the discovered cluster")
	}
	started := &ControlPlane{cfg: cfg, Root: filepath.Join(cfg.Dir, "root"), APIServer: net.JoinHostPort(cfg.Host.String(), strconv.Itoa(apiPort))}
	cp = started
	// The processes started so far stop on any failure; cp itself is nil
	// by then, as every failing return sets it.
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	if err := writeFiles(cp.Root, b.Files); err != nil {
		return nil, err
	}
	for _, d := range []string{"var/log", "var/lib/etcd", "etc/kubernetes/manifests"} {
		if err := os.MkdirAll(filepath.Join(cp.Root, d), 0o700); err != nil {
			return nil, err
		}
	}
	source, err := cp.sourceConfig(ctx)
	if err != nil {
		return nil, err
	}
	cc, err := bootdata.ParseKubeadm(source)
	if err != nil {
		return nil, err
	}
	if cc.Cluster == nil {
		return nil, fmt.Errorf("no ClusterConfiguration for this control plane")
	}
	if cc.Cluster.Etcd.External != nil {
		return nil, fmt.Errorf("the ClusterConfiguration uses external etcd %v: winkube's control-plane machines run local etcd only", cc.Cluster.Etcd.External.Endpoints)
	}
	cp.cluster = cc.Cluster
	cp.Endpoint = cc.Cluster.ControlPlaneEndpoint
	kubeadmCfg, err := cp.kubeadmConfig(source)
	if err != nil {
		return nil, err
	}
	kdir := filepath.Join(cp.Root, "etc/kubernetes")
	if _, err := os.Stat(filepath.Join(kdir, "super-admin.conf")); err == nil {
		// Booting again: the disk has the certificates and kubeconfigs.
		cfg.progress("booting again from the machine's disk")
	} else {
		cfg.progress("issuing certificates with kubeadm")
		if err := cp.kubeadm(ctx, "init", "phase", "certs", "all", "--config", kubeadmCfg); err != nil {
			return nil, err
		}
		if err := cp.kubeadm(ctx, "init", "phase", "kubeconfig", "all", "--config", kubeadmCfg, "--kubeconfig-dir", kdir); err != nil {
			return nil, err
		}
	}
	local := "https://" + cp.APIServer
	for _, f := range []string{"super-admin.conf", "controller-manager.conf", "scheduler.conf", "kubelet.conf"} {
		if err := pointAt(filepath.Join(kdir, f), local); err != nil {
			return nil, err
		}
	}
	if cp.SuperAdmin, err = clientcmd.BuildConfigFromFlags("", filepath.Join(kdir, "super-admin.conf")); err != nil {
		return nil, err
	}
	if cp.Kubelet, err = clientcmd.BuildConfigFromFlags("", filepath.Join(kdir, "kubelet.conf")); err != nil {
		return nil, err
	}
	if joining {
		if cp.initialCluster, err = cp.addEtcdMember(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.Dial != nil {
		if err := cp.startEgress(); err != nil {
			return nil, err
		}
	}
	logs := filepath.Join(cp.Root, "var/log")
	specs := cp.components()
	for _, s := range specs {
		cfg.progress("starting " + s.name)
		p, err := start(s.name, cp.binary(s.name), s.args, logs)
		if err != nil {
			return nil, err
		}
		cp.procs = append(cp.procs, p)
		if s.name == "kube-apiserver" {
			if err := cp.waitReady(ctx, p); err != nil {
				return nil, err
			}
		}
		cp.StaticPods = append(cp.StaticPods, s.pod(cfg, cp))
	}
	if joining {
		// kubeadm join --control-plane uploads nothing: the cluster's
		// configuration and add-ons exist.
		return cp, nil
	}
	cfg.progress("running kubeadm init phases: upload-config, bootstrap-token, addon")
	sa := filepath.Join(kdir, "super-admin.conf")
	for _, phase := range [][]string{{"upload-config", "all"}, {"bootstrap-token"}, {"addon", "all"}} {
		args := append(append([]string{"init", "phase"}, phase...), "--config", kubeadmCfg, "--kubeconfig", sa)
		if err := cp.kubeadm(ctx, args...); err != nil {
			return nil, err
		}
	}
	if err := cp.publishEndpoint(ctx); err != nil {
		return nil, err
	}
	if err := cp.clusterAdmins(ctx); err != nil {
		return nil, err
	}
	return cp, nil
}

// publishEndpoint makes kube-public/cluster-info name the control-plane
// endpoint rather than this machine's own API server. kubeadm copies the
// server of the kubeconfig its bootstrap-token phase is given into
// cluster-info (cmd/kubeadm/app/phases/bootstraptoken/clusterinfo/clusterinfo.go,
// CreateBootstrapConfigMapIfNotExists, kubernetes/kubernetes@b170451c); in
// kubeadm init that is admin.conf, whose server is controlPlaneEndpoint, but
// here the phases run with super-admin.conf pointed at this machine. Joining
// nodes bootstrap and keep their kubelet talking to that server, so with
// this machine's address every node lost the cluster once a rollout
// replaced this machine, though the load balancer still served the new
// one. The stale signatures go in the same write: the controller-manager's
// bootstrap signer signs the new content (pkg/controller/bootstrap/
// bootstrapsigner.go), and discovery waits for it meanwhile.
func (cp *ControlPlane) publishEndpoint(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.SuperAdmin)
	if err != nil {
		return err
	}
	server := "https://" + cp.Endpoint
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading cluster-info to publish the control-plane endpoint: %w", err)
		}
		kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
		if err != nil {
			return fmt.Errorf("cluster-info kubeconfig: %w", err)
		}
		changed := false
		for _, c := range kc.Clusters {
			if c.Server != server {
				c.Server, changed = server, true
			}
		}
		if !changed {
			return nil
		}
		data, err := clientcmd.Write(*kc)
		if err != nil {
			return err
		}
		for k := range cm.Data {
			if strings.HasPrefix(k, "jws-kubeconfig-") {
				delete(cm.Data, k)
			}
		}
		cm.Data["kubeconfig"] = string(data)
		_, err = cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}

// Stop stops the processes, the API server last-but-etcd so that
// controllers do not log a storm of errors.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].stop()
	}
	cp.procs = nil
	if cp.egress != nil {
		cp.egress.Close()
		cp.egress = nil
	}
}

// egressConfigFile is where the machine keeps the API server's
// EgressSelectorConfiguration, named as in the Kubernetes docs' konnectivity
// set-up (kubernetes.io/docs/tasks/extend-kubernetes/setup-konnectivity/,
// admin/konnectivity/egress-selector-configuration.yaml).
const egressConfigFile = "etc/kubernetes/egress-selector-configuration.yaml"

// startEgress opens the machine's CONNECT endpoint and writes the
// configuration the API server's --egress-selector-config-file names.
func (cp *ControlPlane) startEgress() error {
	s, err := egress.Start(cp.cfg.Dial)
	if err != nil {
		return err
	}
	cp.egress = s
	data, err := egress.Configuration(s.Socket())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cp.Root, egressConfigFile), data, 0o600)
}

// Processes are the components' processes by static pod name, for the
// node's kubelet to supervise.
func (cp *ControlPlane) Processes() map[string]*Process {
	out := map[string]*Process{}
	for _, p := range cp.procs {
		out[p.name] = p
	}
	return out
}

// Pids are the component processes' IDs, for measuring them.
func (cp *ControlPlane) Pids() map[string]int {
	out := map[string]int{}
	for _, p := range cp.procs {
		out[p.name] = p.Pid()
	}
	return out
}

func (cp *ControlPlane) kubeadm(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, cp.binary("kubeadm"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubeadm %s: %v: %s", strings.Join(args[:min(len(args), 4)], " "), err, strings.TrimSpace(out.String()))
	}
	logf := filepath.Join(cp.Root, "var/log/kubeadm.log")
	f, err := os.OpenFile(logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		fmt.Fprintf(f, "$ kubeadm %s\n%s\n", strings.Join(args, " "), out.String())
		f.Close()
	}
	return nil
}

// kubeadmConfig rewrites the custom data's kubeadm configuration for this
// machine: kubeadm advertises the VM's private address (it refuses
// loopback ones), the certificates also name the host address, and the
// paths move under the VM's root. Unknown fields pass through untouched.
func (cp *ControlPlane) kubeadmConfig(source []byte) (string, error) {
	host := cp.cfg.Host.String()
	var docs []string
	for _, doc := range bytes.Split(source, []byte("\n---")) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return "", fmt.Errorf("%s: %w", bootdata.InitConfigPath, err)
		}
		if m == nil {
			continue
		}
		switch m["kind"] {
		case "InitConfiguration":
			ep := child(m, "localAPIEndpoint")
			ep["advertiseAddress"], ep["bindPort"] = cp.cfg.PrivateIP, apiPort
			child(m, "nodeRegistration")["name"] = cp.cfg.NodeName
		case "ClusterConfiguration":
			m["certificatesDir"] = filepath.Join(cp.Root, "etc/kubernetes/pki")
			api := child(m, "apiServer")
			api["certSANs"] = appendNew(api["certSANs"], host, "localhost")
			etcd := child(child(m, "etcd"), "local")
			etcd["dataDir"] = filepath.Join(cp.Root, "var/lib/etcd")
			etcd["serverCertSANs"] = appendNew(etcd["serverCertSANs"], host)
			etcd["peerCertSANs"] = appendNew(etcd["peerCertSANs"], host)
		}
		out, err := yaml.Marshal(m)
		if err != nil {
			return "", err
		}
		docs = append(docs, string(out))
	}
	path := filepath.Join(cp.cfg.Dir, "kubeadm.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o600)
}

func child(m map[string]any, k string) map[string]any {
	c, ok := m[k].(map[string]any)
	if !ok {
		c = map[string]any{}
		m[k] = c
	}
	return c
}

func appendNew(list any, add ...string) []any {
	l, _ := list.([]any)
	for _, a := range add {
		seen := false
		for _, x := range l {
			seen = seen || x == a
		}
		if !seen {
			l = append(l, a)
		}
	}
	return l
}

// pointAt makes a kubeconfig reach the local API server.
func pointAt(path, server string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func writeFiles(root string, files []bootdata.File) error {
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(f.Path, "/")))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if v, err := strconv.ParseUint(f.Permissions, 8, 32); err == nil && f.Permissions != "" {
			mode = os.FileMode(v) & 0o700
		}
		if err := os.WriteFile(p, f.Content, mode|0o600); err != nil {
			return err
		}
	}
	return nil
}

func (cp *ControlPlane) waitReady(ctx context.Context, p *Process) error {
	cs, err := kubernetes.NewForConfig(cp.SuperAdmin)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := p.exited(); err != nil {
			return false, err
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = fmt.Errorf("%v: %s", err, body)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("kube-apiserver on %s did not become ready: %v (last: %v)", cp.APIServer, err, last)
	}
	return err
}

// clusterAdmins binds the admin.conf group to cluster-admin, and the API
// server's kubelet client to the kubelet API, which `kubeadm init` does
// outside its phases.
func (cp *ControlPlane) clusterAdmins(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.SuperAdmin)
	if err != nil {
		return err
	}
	for _, b := range []*rbacv1.ClusterRoleBinding{{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:cluster-admins"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "kubeadm:cluster-admins"}},
	}, {
		// kubeadm's apiserver-kubelet-client certificate names no group
		// since kubernetes/kubernetes#138957 (1.37, backported: v1.36.3's
		// kubeadm makes it with CN kube-apiserver-kubelet-client alone);
		// kubeadm init binds the user to system:kubelet-api-admin
		// instead, which the kubelets' SubjectAccessReviews check for
		// exec, logs and port-forward (the binding's name and role as in
		// Cluster API's controlplane/kubeadm/internal/workload_cluster_rbac.go).
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:apiserver-kubelet-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "kube-apiserver-kubelet-client"}},
	}} {
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// MarkControlPlane labels and taints the node as kubeadm's
// mark-control-plane phase does (the kubelet may not set these itself).
func (cp *ControlPlane) MarkControlPlane(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.SuperAdmin)
	if err != nil {
		return err
	}
	taints := []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	reg := cp.cfg.Boot.Kubeadm.NodeRegistration()
	if t := reg.Taints; t != nil {
		taints = taints[:0]
		for _, x := range *t {
			taints = append(taints, corev1.Taint{Key: x.Key, Value: x.Value, Effect: corev1.TaintEffect(x.Effect)})
		}
	}
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, cp.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
		n.Labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
		for _, t := range taints {
			if !hasTaint(n.Spec.Taints, t) {
				n.Spec.Taints = append(n.Spec.Taints, t)
			}
		}
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, nil
	})
}

func hasTaint(ts []corev1.Taint, t corev1.Taint) bool {
	for _, x := range ts {
		if x.Key == t.Key && x.Effect == t.Effect {
			return true
		}
	}
	return false
}

// VersionedBinaries are the binaries a control-plane machine runs at its
// own Kubernetes version; etcd is one for all: kubeadm v1.35 and v1.36 both
// run etcd 3.6 (DefaultEtcdVersion in cmd/kubeadm/app/constants/constants.go,
// kubernetes/kubernetes v1.35.4 and v1.36.3).
var VersionedBinaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubeadm"}

// binary is the path of one of the machine's binaries: of its
// ClusterConfiguration's version when Versions has it, as a VM's image
// carries the kubeadm and components of one release.
func (cp *ControlPlane) binary(name string) string {
	if dir, ok := cp.cfg.Versions[cp.cluster.KubernetesVersion]; ok && name != "etcd" {
		return filepath.Join(dir, name)
	}
	return filepath.Join(cp.cfg.Bin, name)
}

// KubernetesVersion is the cluster's, from its ClusterConfiguration.
func (cp *ControlPlane) KubernetesVersion() string { return cp.cluster.KubernetesVersion }
