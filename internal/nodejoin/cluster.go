package nodejoin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
)

// Windows' overlay numbers: VXLAN network 4096 on UDP 4789, the only VNI
// and port Windows' HNS overlay accepts (DESIGN.md, from the seeds).
const (
	WindowsVNI       = 4096
	WindowsVXLANPort = 4789
)

// The RBAC bindings `kubeadm init` creates so that a node's bootstrap
// token may post a CSR and have it approved (kubernetes/kubernetes
// cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go,
// 1c9cf914f2f951313b8e9f7c321f5bd50b5e3d9f, with the names of
// cmd/kubeadm/app/constants/constants.go).
var bootstrapBindings = []string{"kubeadm:kubelet-bootstrap", "kubeadm:node-autoapprove-bootstrap"}

// Cluster is what a join needs to know of the cluster and what its
// preflight judges.
type Cluster struct {
	// GitVersion is the API server's version ("v1.34.2"); Version parsed.
	GitVersion string
	Version    images.Version
	// Server is the API server's URL as cluster-info publishes it, which
	// is what kubeadm's token discovery gives the node.
	Server string
	CAData []byte
	CAHash string
	// ClusterInfoMissing: kube-public/cluster-info is absent, so no
	// bootstrap token can discover the cluster.
	ClusterInfoMissing bool
	// MissingBindings are kubeadm's bootstrap bindings that are absent.
	MissingBindings []string
	CNI             CNI
	// KubeProxyWindows is the image of kube-system/kube-proxy-windows, ""
	// when the DaemonSet does not exist.
	KubeProxyWindows string
	// ExternalCloudProvider: a cloud controller manager runs, so every
	// kubelet registers with the uninitialized taint.
	ExternalCloudProvider bool
	// Nodes are the names of the cluster's nodes, lower-cased.
	Nodes map[string]bool
	// WindowsContainerd is the containerd version the cluster's Windows
	// nodes of each release run ("1.7.25").
	WindowsContainerd map[infrav1.WindowsServerVersion]string
}

// CNI is the pod network found and what keeps it from serving Windows.
type CNI struct {
	// Name is "calico", "flannel" or "" (none found).
	Name string
	// Source is the object that identified it.
	Source string
	// Problems say what to change for Windows nodes.
	Problems []string
	// WindowsDaemonSet is the namespace/name of its Windows DaemonSet, ""
	// when it has none.
	WindowsDaemonSet string
	// Image is the Linux DaemonSet's image, whose tag is the CNI's
	// release; PodCIDR is flannel's network (net-conf.json's Network).
	Image, PodCIDR string
}

// Inspect reads what the join needs from the cluster. It reads only: the
// token is created by Run after the preflight passes.
func Inspect(ctx context.Context, cs kubernetes.Interface, dyn client.Reader) (*Cluster, error) {
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the API server's version: %w", err)
	}
	c := &Cluster{GitVersion: v.GitVersion, Nodes: map[string]bool{}, WindowsContainerd: map[infrav1.WindowsServerVersion]string{}}
	if c.Version, err = images.ParseVersion(v.GitVersion); err != nil {
		return nil, err
	}
	if err := c.readClusterInfo(ctx, cs); err != nil {
		return nil, err
	}
	for _, name := range bootstrapBindings {
		b, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			c.MissingBindings = append(c.MissingBindings, name)
		case err != nil:
			return nil, fmt.Errorf("reading ClusterRoleBinding %s: %w", name, err)
		case !hasBinding(b):
			c.MissingBindings = append(c.MissingBindings, name)
		}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		c.Nodes[strings.ToLower(n.Name)] = true
		if n.Labels[corev1.LabelOSStable] != "windows" {
			continue
		}
		rel := images.WindowsRelease(n.Labels[corev1.LabelWindowsBuild])
		if ctr, ok := strings.CutPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://"); ok && rel != "" {
			c.WindowsContainerd[rel] = ctr
		}
	}
	dss, err := cs.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing DaemonSets: %w", err)
	}
	deps, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Deployments: %w", err)
	}
	for _, ds := range dss.Items {
		if ds.Namespace == metav1.NamespaceSystem && ds.Name == "kube-proxy-windows" && len(ds.Spec.Template.Spec.Containers) > 0 {
			c.KubeProxyWindows = ds.Spec.Template.Spec.Containers[0].Image
		}
	}
	for _, d := range deps.Items {
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if strings.Contains(ctr.Image, "cloud-controller-manager") {
				c.ExternalCloudProvider = true
			}
		}
	}
	cni, err := findCNI(ctx, cs, dyn, dss.Items)
	if err != nil {
		return nil, err
	}
	c.CNI = cni
	return c, nil
}

// readClusterInfo reads the server and CA a bootstrap token discovers:
// kube-public/cluster-info, which `kubeadm init` publishes.
func (c *Cluster) readClusterInfo(ctx context.Context, cs kubernetes.Interface) error {
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.ClusterInfoMissing = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading kube-public/cluster-info: %w", err)
	}
	kc, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
	if err != nil {
		return fmt.Errorf("kube-public/cluster-info's kubeconfig: %w", err)
	}
	for _, cl := range kc.Clusters {
		c.Server, c.CAData = cl.Server, cl.CertificateAuthorityData
		break
	}
	if c.Server == "" || len(c.CAData) == 0 {
		return fmt.Errorf("kube-public/cluster-info names no server with its CA: recreate it with 'kubeadm init phase bootstrap-token'")
	}
	c.CAHash, err = CAHash(c.CAData)
	return err
}

// findCNI identifies the cluster's pod network by the objects upstream's
// manifests create, and what Windows needs of it: Calico's IPAM with
// strictAffinity (CAPZ templates/addons/windows/calico/calico.yaml,
// 69ec3a40; the tigera operator refuses Windows without it) and a VXLAN
// of VNI 4096 on port 4789; flannel's net-conf.json backend vxlan with
// the same numbers (the seeds' Flannel setup).
func findCNI(ctx context.Context, cs kubernetes.Interface, dyn client.Reader, dss []appsv1.DaemonSet) (CNI, error) {
	var out CNI
	for _, ds := range dss {
		lower := strings.ToLower(ds.Name)
		windows := ds.Spec.Template.Spec.NodeSelector[corev1.LabelOSStable] == "windows"
		switch {
		case strings.Contains(lower, "calico-node") && out.Name == "" && !windows:
			out.Name, out.Source = "calico", "DaemonSet "+ds.Namespace+"/"+ds.Name
			out.Image = firstImage(&ds)
		case strings.Contains(lower, "flannel") && out.Name == "" && !windows:
			out.Name, out.Source = "flannel", "DaemonSet "+ds.Namespace+"/"+ds.Name
			out.Image = firstImage(&ds)
		}
		if windows && (strings.Contains(lower, "calico") || strings.Contains(lower, "flannel")) {
			out.WindowsDaemonSet = ds.Namespace + "/" + ds.Name
		}
	}
	switch out.Name {
	case "calico":
		return out, calicoProblems(ctx, dyn, &out)
	case "flannel":
		return out, flannelProblems(ctx, cs, &out)
	}
	return out, nil
}

func calicoProblems(ctx context.Context, dyn client.Reader, out *CNI) error {
	ipam := &unstructured.Unstructured{}
	ipam.SetAPIVersion("crd.projectcalico.org/v1")
	ipam.SetKind("IPAMConfig")
	err := dyn.Get(ctx, client.ObjectKey{Name: "default"}, ipam)
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		out.Problems = append(out.Problems, "Calico's IPAMConfig default does not exist: Windows nodes need strictAffinity: true (create IPAMConfig default with spec.strictAffinity true, or 'calicoctl ipam configure --strictaffinity=true')")
	case err != nil:
		return fmt.Errorf("reading Calico's IPAMConfig default: %w", err)
	default:
		if strict, _, _ := unstructured.NestedBool(ipam.Object, "spec", "strictAffinity"); !strict {
			out.Problems = append(out.Problems, "Calico's IPAMConfig default has strictAffinity false: Windows nodes need whole IP blocks; set spec.strictAffinity to true")
		}
	}
	felix := &unstructured.Unstructured{}
	felix.SetAPIVersion("crd.projectcalico.org/v1")
	felix.SetKind("FelixConfiguration")
	err = dyn.Get(ctx, client.ObjectKey{Name: "default"}, felix)
	if err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Calico's FelixConfiguration default: %w", err)
	}
	if err == nil {
		// Unset means Calico's defaults, which are Windows' numbers.
		if vni, ok, _ := unstructured.NestedInt64(felix.Object, "spec", "vxlanVNI"); ok && vni != WindowsVNI {
			out.Problems = append(out.Problems, fmt.Sprintf("FelixConfiguration default sets vxlanVNI %d: Windows' overlay uses VNI %d; set spec.vxlanVNI to %d", vni, WindowsVNI, WindowsVNI))
		}
		if port, ok, _ := unstructured.NestedInt64(felix.Object, "spec", "vxlanPort"); ok && port != WindowsVXLANPort {
			out.Problems = append(out.Problems, fmt.Sprintf("FelixConfiguration default sets vxlanPort %d: Windows' overlay uses UDP %d; set spec.vxlanPort to %d", port, WindowsVXLANPort, WindowsVXLANPort))
		}
	}
	return nil
}

func flannelProblems(ctx context.Context, cs kubernetes.Interface, out *CNI) error {
	for _, ns := range []string{"kube-flannel", metav1.NamespaceSystem} {
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading %s/kube-flannel-cfg: %w", ns, err)
		}
		var conf struct {
			Network string
			Backend struct {
				Type      string
				VNI, Port int
			}
		}
		src := ns + "/kube-flannel-cfg net-conf.json"
		if err := json.Unmarshal([]byte(cm.Data["net-conf.json"]), &conf); err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("%s is not JSON (%v): fix it before Windows nodes join", src, err))
			return nil
		}
		out.PodCIDR = conf.Network
		if !strings.EqualFold(conf.Backend.Type, "vxlan") {
			out.Problems = append(out.Problems, fmt.Sprintf("%s has Backend.Type %q: this join sets Windows up for VXLAN; set Backend.Type vxlan with VNI %d and Port %d", src, conf.Backend.Type, WindowsVNI, WindowsVXLANPort))
			return nil
		}
		if conf.Backend.VNI != WindowsVNI || conf.Backend.Port != WindowsVXLANPort {
			// flannel's defaults (VNI 1, port 8472) are Linux's only.
			out.Problems = append(out.Problems, fmt.Sprintf("%s has VNI %d and Port %d (0 means flannel's defaults 1 and 8472): Windows needs VNI %d and Port %d; set Backend.VNI and Backend.Port and restart flannel", src, conf.Backend.VNI, conf.Backend.Port, WindowsVNI, WindowsVXLANPort))
		}
		return nil
	}
	out.Problems = append(out.Problems, "flannel runs but no kube-flannel-cfg ConfigMap was found in kube-flannel or kube-system: its VXLAN VNI and port cannot be checked")
	return nil
}

func firstImage(ds *appsv1.DaemonSet) string {
	for _, c := range ds.Spec.Template.Spec.Containers {
		return c.Image
	}
	return ""
}

// hasBinding reports whether a binding grants kubeadm's node token group.
func hasBinding(b *rbacv1.ClusterRoleBinding) bool {
	for _, s := range b.Subjects {
		if s.Kind == rbacv1.GroupKind && s.Name == NodeTokenGroup {
			return true
		}
	}
	return false
}
