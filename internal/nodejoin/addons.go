package nodejoin

import (
	"context"
	"fmt"
	"io"
	"net"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
)

// FieldManager owns, in server-side apply, the add-ons a join applies, so
// that a later apply by their owner shows who set what.
const FieldManager = "winkube-node-join"

// applyAddons applies the Windows add-ons cluster c lacks, the objects
// winkube's flavors deliver for its CNI at its versions. api is the API
// server's host:port as Windows hosts reach it, which the CNI's Windows
// pods read from kubernetes-services-endpoint when no one published it.
func applyAddons(ctx context.Context, cl client.Client, c *Cluster, o Options, api string, out io.Writer) error {
	objs, err := flavors.WindowsAddonObjects(flavors.WindowsAddons{
		CNI: c.CNI.Name, KubernetesVersion: c.GitVersion, CalicoVersion: imageTag(c.CNI.Image), PodCIDR: c.CNI.PodCIDR,
		KubeProxy: c.KubeProxyWindows == "", CNIDaemonSet: c.CNI.WindowsDaemonSet == "",
		FlannelWindowsImage: o.FlannelWindowsImage, KubeProxyWindowsImage: o.KubeProxyWindowsImage,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", ApplyAddonsFlag, err)
	}
	if c.CNI.WindowsDaemonSet == "" {
		ep, err := servicesEndpoint(ctx, cl, api)
		if err != nil {
			return err
		}
		if ep != nil {
			objs = append([]runtime.Object{ep}, objs...)
		}
	}
	for _, o := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{Object: u}
		// Apply sends what the applier owns: no status, no server fields.
		delete(obj.Object, "status")
		unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager)); err != nil {
			return fmt.Errorf("%s: applying %s %s/%s: %w", ApplyAddonsFlag, obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		fmt.Fprintf(out, "winkube: applied %s %s/%s (server-side, field manager %s)\n", obj.GetKind(), obj.GetNamespace(), obj.GetName(), FieldManager)
	}
	return nil
}

// servicesEndpoint is kube-system/kubernetes-services-endpoint with the
// API server's address, which the CNI's Windows pods read because a
// Windows host reaches the kubernetes Service only after kube-proxy runs
// (see flavors' servicesEndpointEnv); nil when the cluster has one, whose
// owner (winkube's provider, or the tigera operator's user) it stays.
func servicesEndpoint(ctx context.Context, cl client.Client, api string) (*corev1.ConfigMap, error) {
	key := client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: infrav1.ServicesEndpointConfigMap}
	err := cl.Get(ctx, key, &corev1.ConfigMap{})
	switch {
	case err == nil:
		return nil, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	host, port, err := net.SplitHostPort(api)
	if err != nil {
		return nil, fmt.Errorf("the API server's address %q: %w", api, err)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Data:       map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
	}, nil
}
