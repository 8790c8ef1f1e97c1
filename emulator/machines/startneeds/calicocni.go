package startneeds

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// What Calico's CNI plugin and calico-node ask of the API server around
// one pod's network, read from projectcalico/calico v3.30.7 (74485ea4):
//   - cni-plugin/pkg/plugin/plugin.go cmdAdd: ClusterInformation
//     "default" got first, its datastoreReady must be true;
//   - cni-plugin/pkg/k8s/k8s.go CmdAddK8s (policy type k8s): the pod's
//     Namespace and Pod got; CmdDelK8s: the IPAM released, then the
//     pod's IP annotations emptied;
//   - cni-plugin/pkg/ipamplugin/ipam_plugin.go with libcalico-go
//     lib/ipam/ipam.go autoAssign: the IPAMConfig, the IPReservations,
//     the enabled IPPools and the host's BlockAffinities read, the handle
//     k8s-pod-network.<container ID> written (its resource name is the
//     handle lower-cased, lib/backend/k8s/resources/ipam_handle.go);
//     ReleaseByHandle reads the handle and deletes it;
//   - libcalico-go lib/backend/k8s/resources/workloadendpoint.go
//     patchPodAnnotations: the pod's cni.projectcalico.org/podIP, podIPs
//     and containerID annotations written with a strategic-merge patch
//     of pods/status;
//   - libcalico-go lib/clientv3/client.go ensureClusterInformation,
//     called by calico-node's startup: ClusterInformation "default" got,
//     created when missing, with datastoreReady true.
//
// The plugin acts with the kubeconfig calico-node's install-cni writes
// beside the CNI configuration: a token of the calico-cni-plugin
// ServiceAccount, which install-cni requests with calico-node's own
// (cni-plugin/pkg/install/install.go, the manifest's calico-node role
// grants create on serviceaccounts/token for that name only).
const (
	// CalicoCNIServiceAccount is the ServiceAccount whose token the CNI
	// plugin's kubeconfig carries.
	CalicoCNIServiceAccount = "calico-cni-plugin"
	calicoNetworkName       = "k8s-pod-network"
	annotationPodIP         = "cni.projectcalico.org/podIP"
	annotationPodIPs        = "cni.projectcalico.org/podIPs"
	annotationContainerID   = "cni.projectcalico.org/containerID"
)

func calicoResource(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: calicoGroup, Version: "v1", Resource: resource}
}

// CalicoCNIConfig is the API server as the CNI plugin of a node reaches
// it: a token of the calico-cni-plugin ServiceAccount of the calico-node
// pod's namespace, requested with calico-node's credentials (nodeConfig),
// as install-cni does.
func CalicoCNIConfig(ctx context.Context, nodeConfig *rest.Config, namespace string) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(nodeConfig)
	if err != nil {
		return nil, err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, CalicoCNIServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("Error installing CNI plugin: failed to create token for the CNI plugin: %w", err)
	}
	cfg := rest.AnonymousClientConfig(nodeConfig)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// EnsureClusterInformation is what calico-node's startup does before
// anything else with the datastore: ClusterInformation "default" exists
// and says the datastore is ready.
func EnsureClusterInformation(ctx context.Context, cfg *rest.Config, calicoVersion string) error {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ci := dc.Resource(calicoResource("clusterinformations"))
	cur, err := ci.Get(ctx, "default", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(calicoGroup + "/v1")
		u.SetKind("ClusterInformation")
		u.SetName("default")
		_ = unstructured.SetNestedField(u.Object, true, "spec", "datastoreReady")
		_ = unstructured.SetNestedField(u.Object, calicoVersion, "spec", "calicoVersion")
		_ = unstructured.SetNestedField(u.Object, "k8s,kdd,vxlan", "spec", "clusterType")
		if _, err = ci.Create(ctx, u, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if ready, _, _ := unstructured.NestedBool(cur.Object, "spec", "datastoreReady"); ready {
		return nil
	}
	_ = unstructured.SetNestedField(cur.Object, true, "spec", "datastoreReady")
	_, err = ci.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// CalicoCNIAdd is the Calico CNI plugin's ADD for a pod's sandbox, as the
// API server sees it: every call made with cfg (the plugin's kubeconfig),
// so that a rule missing from the calico-cni-plugin role fails the ADD,
// and the pod gets no address, as on a node. ip is the address the IPAM
// hands out; its error is the plugin's, as containerd reports it.
func CalicoCNIAdd(ctx context.Context, cfg *rest.Config, node string, pod *corev1.Pod, containerID string, ip netip.Addr) error {
	if err := calicoCNIAdd(ctx, cfg, node, pod, containerID, ip); err != nil {
		return fmt.Errorf("plugin type=\"calico\" failed (add): %w", err)
	}
	return nil
}

func calicoCNIAdd(ctx context.Context, cfg *rest.Config, node string, pod *corev1.Pod, containerID string, ip netip.Addr) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ci, err := dc.Resource(calicoResource("clusterinformations")).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("error getting ClusterInformation: %w", err)
	}
	if ready, _, _ := unstructured.NestedBool(ci.Object, "spec", "datastoreReady"); !ready {
		return fmt.Errorf("Calico is currently not ready to process requests")
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, pod.Namespace, metav1.GetOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		return err
	}
	// calico-ipam's AutoAssign. An IPAMConfig nobody wrote is the
	// default one.
	if _, err := dc.Resource(calicoResource("ipamconfigs")).Get(ctx, "default", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return ipamErr(err)
	}
	for _, r := range []string{"ipreservations", "ippools"} {
		if _, err := dc.Resource(calicoResource(r)).List(ctx, metav1.ListOptions{}); err != nil {
			return ipamErr(err)
		}
	}
	if _, err := dc.Resource(calicoResource("blockaffinities")).List(ctx, metav1.ListOptions{LabelSelector: "projectcalico.org/host=" + node}); err != nil {
		return ipamErr(err)
	}
	handle := calicoNetworkName + "." + containerID
	handles := dc.Resource(calicoResource("ipamhandles"))
	h := &unstructured.Unstructured{}
	h.SetAPIVersion(calicoGroup + "/v1")
	h.SetKind("IPAMHandle")
	h.SetName(strings.ToLower(handle))
	_ = unstructured.SetNestedField(h.Object, handle, "spec", "handleID")
	_ = unstructured.SetNestedField(h.Object, map[string]any{}, "spec", "block")
	if _, err := handles.Create(ctx, h, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return ipamErr(err)
	}
	// The workload endpoint: the pod's IP annotations.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID, "annotations": map[string]string{
		annotationPodIP: ip.String() + "/32", annotationPodIPs: ip.String() + "/32", annotationContainerID: containerID,
	}}})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		// The IPAM's allocation is released again, as CmdAddK8s's
		// releaseIPAM does when the endpoint cannot be written.
		_ = handles.Delete(ctx, strings.ToLower(handle), metav1.DeleteOptions{})
		return err
	}
	return nil
}

// ipamErr is a failure of the calico-ipam plugin, which the calico
// plugin runs as a CNI IPAM plugin and whose error it returns.
func ipamErr(err error) error { return fmt.Errorf("calico-ipam: %w", err) }

// CalicoCNIDel is the plugin's DEL: the IPAM handle released and the
// pod's IP annotations emptied (a pod already gone is not an error).
func CalicoCNIDel(ctx context.Context, cfg *rest.Config, namespace, name, containerID string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	handle := strings.ToLower(calicoNetworkName + "." + containerID)
	handles := dc.Resource(calicoResource("ipamhandles"))
	if _, err := handles.Get(ctx, handle, metav1.GetOptions{}); err == nil {
		if err := handles.Delete(ctx, handle, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("plugin type=\"calico\" failed (delete): %w", err)
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("plugin type=\"calico\" failed (delete): %w", err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + annotationPodIP + `":"","` + annotationPodIPs + `":""}}}`)
	if _, err := cs.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("plugin type=\"calico\" failed (delete): %w", err)
	}
	return nil
}
