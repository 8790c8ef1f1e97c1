package doctor

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/images"
)

// State is one reading of the workload cluster that every check works on.
type State struct {
	// Version is the control plane's version (the API server's).
	Version      images.Version
	Nodes        []corev1.Node
	Pods         []corev1.Pod
	Services     []corev1.Service
	Slices       []discoveryv1.EndpointSlice
	Deployments  []appsv1.Deployment
	StatefulSets []appsv1.StatefulSet
	DaemonSets   []appsv1.DaemonSet
	ConfigMaps   []corev1.ConfigMap
	Events       []corev1.Event
	// Calico's IPPools and FelixConfigurations, when its CRDs are installed.
	IPPools, FelixConfigs []unstructured.Unstructured
	// Azure: the network is Azure's (VNet MTU 1400).
	Azure bool
}

var (
	ipPoolGVK = schema.GroupVersionKind{Group: "crd.projectcalico.org", Version: "v1", Kind: "IPPoolList"}
	felixGVK  = schema.GroupVersionKind{Group: "crd.projectcalico.org", Version: "v1", Kind: "FelixConfigurationList"}
)

// Load reads what the checks need. cfg, when set, gives the API server's
// version; without it Version stays zero and the version checks say nothing.
func Load(ctx context.Context, c client.Client, cfg *rest.Config) (*State, error) {
	s := &State{}
	if cfg != nil {
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return nil, err
		}
		info, err := dc.ServerVersion()
		if err != nil {
			return nil, fmt.Errorf("reading the workload cluster's version: %w", err)
		}
		if s.Version, err = images.ParseVersion(info.GitVersion); err != nil {
			return nil, err
		}
	}
	lists := []struct {
		what string
		list client.ObjectList
	}{
		{"nodes", &corev1.NodeList{}}, {"pods", &corev1.PodList{}}, {"services", &corev1.ServiceList{}},
		{"endpoint slices", &discoveryv1.EndpointSliceList{}}, {"deployments", &appsv1.DeploymentList{}},
		{"stateful sets", &appsv1.StatefulSetList{}}, {"daemon sets", &appsv1.DaemonSetList{}},
		{"config maps", &corev1.ConfigMapList{}}, {"events", &corev1.EventList{}},
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list); err != nil {
			return nil, fmt.Errorf("listing the workload cluster's %s: %w", l.what, err)
		}
	}
	s.Nodes = lists[0].list.(*corev1.NodeList).Items
	s.Pods = lists[1].list.(*corev1.PodList).Items
	s.Services = lists[2].list.(*corev1.ServiceList).Items
	s.Slices = lists[3].list.(*discoveryv1.EndpointSliceList).Items
	s.Deployments = lists[4].list.(*appsv1.DeploymentList).Items
	s.StatefulSets = lists[5].list.(*appsv1.StatefulSetList).Items
	s.DaemonSets = lists[6].list.(*appsv1.DaemonSetList).Items
	s.ConfigMaps = lists[7].list.(*corev1.ConfigMapList).Items
	s.Events = lists[8].list.(*corev1.EventList).Items
	for _, l := range []struct {
		gvk schema.GroupVersionKind
		out *[]unstructured.Unstructured
	}{{ipPoolGVK, &s.IPPools}, {felixGVK, &s.FelixConfigs}} {
		u := &unstructured.UnstructuredList{}
		u.SetGroupVersionKind(l.gvk)
		err := c.List(ctx, u)
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			continue // Calico is not installed
		}
		if err != nil {
			return nil, fmt.Errorf("listing Calico's %s: %w", strings.TrimSuffix(l.gvk.Kind, "List"), err)
		}
		*l.out = u.Items
	}
	return s, nil
}

// windowsNodes maps the names of the Windows nodes to their nodes.
func (s *State) windowsNodes() map[string]*corev1.Node {
	out := map[string]*corev1.Node{}
	for i := range s.Nodes {
		if isWindowsNode(&s.Nodes[i]) {
			out[s.Nodes[i].Name] = &s.Nodes[i]
		}
	}
	return out
}

func isWindowsNode(n *corev1.Node) bool {
	return n.Labels[corev1.LabelOSStable] == "windows" || n.Status.NodeInfo.OperatingSystem == "windows"
}

// node returns the node named name, or nil.
func (s *State) node(name string) *corev1.Node {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i]
		}
	}
	return nil
}

func ref(kind, namespace, name string) string {
	if namespace == "" {
		return kind + "/" + name
	}
	return kind + "/" + namespace + "/" + name
}
