package metricsserver

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

const (
	group        = "metrics.k8s.io"
	groupVersion = group + "/v1beta1"
)

var everything = labels.Everything()

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeStatus answers an error as a Kubernetes API server does: a Status.
func writeStatus(w http.ResponseWriter, err error) {
	st := apierrors.APIStatus(apierrors.NewInternalError(err))
	if s, ok := err.(apierrors.APIStatus); ok {
		st = s
	}
	status := st.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	w.Header().Set("X-Content-Type-Options", "nosniff")
	writeJSON(w, int(status.Code), status)
}

func (s *Server) serveGroups(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{apiGroup()}})
}

func (s *Server) serveGroup(w http.ResponseWriter, _ *http.Request) {
	g := apiGroup()
	g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
	writeJSON(w, http.StatusOK, &g)
}

func apiGroup() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: groupVersion, Version: "v1beta1"}
	return metav1.APIGroup{Name: group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

// serveResources is the group version's discovery: nodes and pods, get
// and list (pkg/api/install.go registers both read-only).
func (s *Server) serveResources(w http.ResponseWriter, _ *http.Request) {
	verbs := metav1.Verbs{"get", "list"}
	writeJSON(w, http.StatusOK, &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: groupVersion,
		APIResources: []metav1.APIResource{
			{Name: "nodes", Kind: "NodeMetrics", Namespaced: false, Verbs: verbs},
			{Name: "pods", Kind: "PodMetrics", Namespaced: true, Verbs: verbs},
		},
	})
}

// selectors reads labelSelector and fieldSelector; the field selector
// matches metadata.name and metadata.namespace (pkg/api/filter.go).
func selectors(r *http.Request) (labels.Selector, fields.Selector, error) {
	ls, fs := labels.Everything(), fields.Everything()
	var err error
	if v := r.URL.Query().Get("labelSelector"); v != "" {
		if ls, err = labels.Parse(v); err != nil {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
	}
	if v := r.URL.Query().Get("fieldSelector"); v != "" {
		if fs, err = fields.ParseSelector(v); err != nil {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
	}
	return ls, fs, nil
}

func (s *Server) ready(w http.ResponseWriter) bool {
	s.mu.Lock()
	ok := s.nodes != nil
	s.mu.Unlock()
	if !ok {
		writeStatus(w, apierrors.NewServiceUnavailable("metrics-server has not listed nodes and pods yet"))
	}
	return ok
}

func (s *Server) nodeMetrics(n *corev1.Node) (metricsv1beta1.NodeMetrics, bool) {
	u, ok := s.store.node(n.Name)
	if !ok {
		return metricsv1beta1.NodeMetrics{}, false
	}
	return metricsv1beta1.NodeMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, CreationTimestamp: metav1.NewTime(time.Now())},
		Timestamp:  metav1.NewTime(u.at), Window: metav1.Duration{Duration: u.window}, Usage: u.list,
	}, true
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	ls, fs, err := selectors(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	nodes, err := s.nodes.List(ls)
	if err != nil {
		writeStatus(w, err)
		return
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	list := &metricsv1beta1.NodeMetricsList{TypeMeta: metav1.TypeMeta{Kind: "NodeMetricsList", APIVersion: groupVersion}, Items: []metricsv1beta1.NodeMetrics{}}
	for _, n := range nodes {
		if !fs.Matches(fields.Set{"metadata.name": n.Name}) {
			continue
		}
		if m, ok := s.nodeMetrics(n); ok {
			list.Items = append(list.Items, m)
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	name := r.PathValue("name")
	n, err := s.nodes.Get(name)
	if err != nil {
		writeStatus(w, err)
		return
	}
	m, ok := s.nodeMetrics(n)
	if !ok {
		// pkg/api/node.go: no metrics yet is NotFound of nodemetrics.
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: group, Resource: "nodes"}, name))
		return
	}
	m.TypeMeta = metav1.TypeMeta{Kind: "NodeMetrics", APIVersion: groupVersion}
	writeJSON(w, http.StatusOK, &m)
}

func (s *Server) podMetrics(p *corev1.Pod) (metricsv1beta1.PodMetrics, bool) {
	ctrs, u, ok := s.store.pod(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	if !ok {
		return metricsv1beta1.PodMetrics{}, false
	}
	sort.Slice(ctrs, func(i, j int) bool { return ctrs[i].name < ctrs[j].name })
	m := metricsv1beta1.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, CreationTimestamp: metav1.NewTime(time.Now())},
		Timestamp:  metav1.NewTime(u.at), Window: metav1.Duration{Duration: u.window},
		Containers: []metricsv1beta1.ContainerMetrics{},
	}
	for _, c := range ctrs {
		m.Containers = append(m.Containers, metricsv1beta1.ContainerMetrics{Name: c.name, Usage: c.list})
	}
	return m, true
}

func (s *Server) listPods(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	ls, fs, err := selectors(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	var pods []*corev1.Pod
	if ns := r.PathValue("ns"); ns != "" {
		pods, err = s.pods.Pods(ns).List(ls)
	} else {
		pods, err = s.pods.List(ls)
	}
	if err != nil {
		writeStatus(w, err)
		return
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	list := &metricsv1beta1.PodMetricsList{TypeMeta: metav1.TypeMeta{Kind: "PodMetricsList", APIVersion: groupVersion}, Items: []metricsv1beta1.PodMetrics{}}
	for _, p := range pods {
		if !fs.Matches(fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace}) {
			continue
		}
		if m, ok := s.podMetrics(p); ok {
			list.Items = append(list.Items, m)
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) getPod(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	ns, name := r.PathValue("ns"), r.PathValue("name")
	p, err := s.pods.Pods(ns).Get(name)
	if err != nil {
		writeStatus(w, err)
		return
	}
	m, ok := s.podMetrics(p)
	if !ok {
		// pkg/api/pod.go names it namespace/name.
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: group, Resource: "pods"}, ns+"/"+name))
		return
	}
	m.TypeMeta = metav1.TypeMeta{Kind: "PodMetrics", APIVersion: groupVersion}
	writeJSON(w, http.StatusOK, &m)
}
