package localworld

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/testenv"
)

// The world asks for the workload cluster's kubeconfig every second while
// it reports progress and every two seconds for the workload admission,
// for as long as it runs: from the controllers' cache (which holds the
// clusters' Secrets), not with a GET to the management API server each
// time.
func TestWorkloadKubeconfigIsReadFromTheCache(t *testing.T) {
	// The request counts it reads are the shared API server's: it is not
	// parallel, so no other test's requests are among them.
	env := sharedAPI.Env(t)
	s := env.Scheme
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
	if err := env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "c-kubeconfig", Namespace: namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: "c"}},
		Data:       map[string][]byte{"value": []byte(kubeconfig)},
	}); err != nil {
		t.Fatal(err)
	}
	// The cache as the world's manager has it.
	c, err := cache.New(env.Config, controllers.SecretCache(cache.Options{Scheme: s}))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	live, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	w := &World{Client: live, cache: c, opts: Options{Name: "c"}}
	if _, _, err := w.Workload(ctx); err != nil { // starts the cache's watch of Secrets
		t.Fatal(err)
	}
	before := testenv.APIRequests(ctx, t, env.Config, "GET", "secrets")
	for range 5 {
		cfg, _, err := w.Workload(ctx)
		if err != nil || cfg.Host != "https://127.0.0.1:6443" {
			t.Fatalf("the workload's config: %v, %v", cfg, err)
		}
	}
	if n := testenv.APIRequests(ctx, t, env.Config, "GET", "secrets") - before; n != 0 {
		t.Errorf("5 reads of the workload's kubeconfig made the API server answer %d GETs of Secrets, want none", n)
	}
}
