package apicallers_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	capicontroller "sigs.k8s.io/cluster-api/util/controller"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/winkube/winkube/internal/apicallers"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e }))
}

// Two controllers share one manager, as Cluster API's and winkube's do in
// the local world: one built with Cluster API's builder reads a ConfigMap
// live on every reconcile, the other, built with controller-runtime's,
// labels a Secret. Each request must be counted under the controller that
// made it, and the caches' watches (a streaming list is one WATCH) under none.
func TestRequestsAreCountedByTheControllerThatMadeThem(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counter := apicallers.New()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(counter.Wrap)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Logger: counter.Logger(logr.Discard()),
		Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	live := mgr.GetAPIReader()
	if err := capicontroller.NewControllerManagedBy(mgr, logr.Discard()).For(&corev1.ConfigMap{}).Named("reader").
		Complete(ctx, reconcileFunc(func(ctx context.Context, req ctrl.Request) error {
			return client.IgnoreNotFound(live.Get(ctx, req.NamespacedName, &corev1.ConfigMap{}))
		})); err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.Secret{}).Named("writer").
		Complete(reconcileFunc(func(ctx context.Context, req ctrl.Request) error {
			if req.Name != "labelled" {
				return nil
			}
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name, Labels: map[string]string{"seen": "yes"}}}
			return c.Patch(ctx, s, client.Merge)
		})); err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)

	// Created by the test's own client, which is not counted.
	if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "read"}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "labelled"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "labelled"}, s); err != nil {
			return err.Error()
		}
		if s.Labels["seen"] != "yes" {
			return "the writer has not labelled the Secret yet"
		}
		if n := counter.Counts()[apicallers.Key{Controller: "reader", Request: "GET configmaps"}]; n == 0 {
			return "no live read of a ConfigMap counted for the reader yet"
		}
		return ""
	})

	counts := counter.Counts()
	byRequest := map[string]float64{}
	for k, v := range counts {
		byRequest[k.Request] += v
	}
	for _, want := range []struct {
		controller, request string
	}{
		{"reader", "GET configmaps"},
		{"writer", "PATCH secrets"},
		{"", "WATCH configmaps"},
		{"", "WATCH secrets"},
	} {
		k := apicallers.Key{Controller: want.controller, Request: want.request}
		if counts[k] == 0 || counts[k] != byRequest[want.request] {
			t.Errorf("%s: %v counted for controller %q of %v in all, want all of them there; counts: %v",
				want.request, counts[k], want.controller, byRequest[want.request], counts)
		}
	}
}

type reconcileFunc func(context.Context, ctrl.Request) error

func (f reconcileFunc) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := f(ctx, req); err != nil {
		return ctrl.Result{}, fmt.Errorf("reconcile %s: %w", req, err)
	}
	return ctrl.Result{}, nil
}
