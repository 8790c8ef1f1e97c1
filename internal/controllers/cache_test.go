package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// The manager holds only clusters' Secrets in memory, yet its client reads
// any Secret, fresh from the API server.
func TestOnlyClustersSecretsAreCached(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controllers.SecretCache(cache.Options{}), Client: controllers.ReadSecretsLive(client.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "secrets-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	clusters := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "demo-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}}}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "someone-elses-tls"}}
	for _, s := range []*corev1.Secret{clusters, other} {
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("no cache sync")
	}
	poll.Until(t, 30*time.Second, func() string {
		if err := mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(clusters), &corev1.Secret{}); err != nil {
			return "the cluster's Secret is not cached: " + err.Error()
		}
		return ""
	})
	if err := mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Secret of no cluster is in the cache: %v", err)
	}
	if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{}); err != nil {
		t.Errorf("the client cannot read a Secret of no cluster: %v", err)
	}
}
