package machines

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestKubeletClientSpeaksProtobuf: the kubelet's lease renewal goes out in
// protobuf and asks for protobuf first, as a real kubelet's does, whatever
// the kubeconfig it was loaded from says; the kubeconfig's own config is
// left as it was (the runtime keeps using it for other clients).
func TestKubeletClientSpeaksProtobuf(t *testing.T) {
	var mu sync.Mutex
	var contentType, accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		contentType, accept = r.Header.Get("Content-Type"), r.Header.Get("Accept")
		mu.Unlock()
		// A JSON Status, as an API server answers a client that also
		// accepts JSON when it fails the request.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`))
	}))
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL}
	client, err := kubeletClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: "kube-node-lease", ResourceVersion: "1"}}
	_, err = client.CoordinationV1().Leases("kube-node-lease").Update(context.Background(), lease, metav1.UpdateOptions{})
	if err == nil {
		t.Fatal("the update succeeded against a server that refuses it")
	}
	mu.Lock()
	defer mu.Unlock()
	if contentType != "application/vnd.kubernetes.protobuf" {
		t.Errorf("the lease went out as %q, want protobuf", contentType)
	}
	if accept != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("the kubelet accepts %q, want protobuf then JSON", accept)
	}
	if cfg.ContentType != "" || cfg.QPS != 0 {
		t.Errorf("the kubeconfig's config was changed: content type %q, QPS %v", cfg.ContentType, cfg.QPS)
	}
}
