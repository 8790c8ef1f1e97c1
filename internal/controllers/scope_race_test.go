package controllers_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// TestScopedListTakenAgainWhenNamespaceAdded: a test that adds a namespace
// to its scope while one of its informers lists, and creates an object in
// it, may get a list whose resource version already includes the object,
// filtered to the namespaces it had before. A watch from that version never
// sends the object: the informer would miss it for good (a Cluster missing
// from the cache for two minutes failed TestAzureCallsTimeOut once). The
// list must be taken again with the new namespace.
func TestScopedListTakenAgainWhenNamespaceAdded(t *testing.T) {
	s := &scope{nss: map[string]bool{}, watchers: map[*scopedWatch]bool{}}
	var selectors []string
	lw := toolscache.ToListerWatcherWithContext(&toolscache.ListWatch{
		ListWithContextFunc: func(_ context.Context, o metav1.ListOptions) (kruntime.Object, error) {
			selectors = append(selectors, o.FieldSelector)
			list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
			if len(selectors) == 1 {
				// The test's namespace is added, and its object made,
				// while the API server answers the first list.
				s.nss["mine"] = true
				return list, nil
			}
			list.Items = []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "made", Namespace: "mine"}}}
			return list, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewEmptyWatch(), nil
		},
	})
	w := &scopedListerWatcher{lw: lw, s: s, byServer: true}
	got, err := w.ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"metadata.namespace=" + noNamespace, "metadata.namespace=mine"}
	if len(selectors) != 2 || selectors[0] != want[0] || selectors[1] != want[1] {
		t.Errorf("lists sent with field selectors %q, want %q", selectors, want)
	}
	if items := got.(*corev1.ConfigMapList).Items; len(items) != 1 || items[0].Name != "made" {
		t.Errorf("the informer got %d objects, want the one made in the namespace added during the first list", len(items))
	}
}
