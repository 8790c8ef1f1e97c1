package startneeds

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// calicoAPI answers what a check reads of a cluster with Calico's CRDs
// installed: the crd.projectcalico.org/v1 discovery document and the
// calico-config ConfigMap, and counts the requests by path.
type calicoAPI struct {
	mu    sync.Mutex
	paths map[string]int
}

func (a *calicoAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.paths[r.URL.Path]++
	a.mu.Unlock()
	var body any
	switch r.URL.Path {
	case "/apis/crd.projectcalico.org/v1":
		l := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "crd.projectcalico.org/v1"}
		for _, crd := range append(append([]string(nil), calicoFelixCRDs...), "kubecontrollersconfigurations", "tiers", "bgppeers", "bgpfilters", "ipreservations") {
			kind := strings.TrimSuffix(crd, "s")
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: crd, SingularName: kind, Kind: kind, Namespaced: crd == "networkpolicies" || crd == "networksets",
				Verbs: []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}, StorageVersionHash: "abcdefghijk="})
		}
		body = l
	case "/api/v1/namespaces/kube-system/configmaps/calico-config":
		body = corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "calico-config", Namespace: "kube-system"},
			Data: map[string]string{"calico_backend": "vxlan", "veth_mtu": "1350", "typha_service_name": "none", "cni_network_config": strings.Repeat("{}", 400)}}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// readingChecker is a checker of one component that needs Felix's CRDs
// and three settings of calico-config, as calico-node's environment takes
// them, against a calicoAPI.
func readingChecker(tb testing.TB) (*Checker, *calicoAPI, corev1.Container) {
	api := &calicoAPI{paths: map[string]int{}}
	srv := httptest.NewServer(api)
	tb.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		tb.Fatal(err)
	}
	comp := Component{Name: "calico-node", Images: []string{"docker.io/calico/node"}, OS: "linux", Source: "test"}
	ctr := corev1.Container{Name: "calico-node", Image: "docker.io/calico/node:v3.30.7"}
	for _, key := range []string{"calico_backend", "veth_mtu", "typha_service_name"} {
		env := strings.ToUpper(key)
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "calico-config"}, Key: key}}})
		comp.Needs = append(comp.Needs, Need{Env: env, Source: "test", Log: "no %s"})
	}
	comp.Needs = append(comp.Needs, crds("test", calicoFelixCRDs...)...)
	return &Checker{Client: cs, Components: []Component{comp}}, api, ctr
}

var calicoPod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "calico-node-x", Namespace: "kube-system"}}

// TestCheckReadsEachOnce: one check reads the discovery of a CRD group
// and a ConfigMap once, however many of its needs name them; the next
// check reads them again, so what changed in between is seen.
func TestCheckReadsEachOnce(t *testing.T) {
	c, api, ctr := readingChecker(t)
	ctx := context.Background()
	for range 2 {
		f, err := c.Check(ctx, Node{OS: "linux"}, calicoPod, ctr)
		if err != nil || f != nil {
			t.Fatalf("check: %+v %v", f, err)
		}
	}
	want := map[string]int{"/apis/crd.projectcalico.org/v1": 2, "/api/v1/namespaces/kube-system/configmaps/calico-config": 2}
	for p, n := range want {
		if api.paths[p] != n {
			t.Errorf("two checks read %s %d times, want %d (once each)", p, api.paths[p], n)
		}
	}
	// A CRD missing is still found missing: the group's one read is used
	// for every kind.
	c.Components[0].Needs = append(c.Components[0].Needs, crds("test", "stagednetworkpolicies")...)
	f, err := c.Check(ctx, Node{OS: "linux"}, calicoPod, ctr)
	if err != nil || f == nil || f.Missing != "CRD stagednetworkpolicies.crd.projectcalico.org" {
		t.Errorf("a kind the API does not serve: %+v %v, want it missing", f, err)
	}
}

// BenchmarkCheckCalicoNode: one start check of a container that needs
// Felix's fifteen CRDs and three calico-config settings, against an HTTP
// API (requests, JSON decoding).
func BenchmarkCheckCalicoNode(b *testing.B) {
	c, api, ctr := readingChecker(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if f, err := c.Check(ctx, Node{OS: "linux"}, calicoPod, ctr); err != nil || f != nil {
			b.Fatalf("check: %+v %v", f, err)
		}
	}
	total := 0
	for _, n := range api.paths {
		total += n
	}
	b.ReportMetric(float64(total)/float64(b.N), "requests/op")
}
