package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// countingReader passes reads to the real API server and counts the
// Secrets it reads in full, by key.
type countingReader struct {
	client.Reader
	mu   sync.Mutex
	gets map[client.ObjectKey]int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		r.mu.Lock()
		r.gets[key]++
		r.mu.Unlock()
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) count(key client.ObjectKey) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[key]
}

// TestIdentitySecretReads covers how an identity's Secret is read: the
// manager's own cache (a real manager on the real API server) says which
// version is current, and its data is read from the API server once per
// version, however many reconciles need it, while a rotation or a deletion
// is still seen.
func TestIdentitySecretReads(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	testenv.RunManager(t, mgr)
	api := &countingReader{Reader: mgr.GetAPIReader(), gets: map[client.ObjectKey]int{}}
	ids := &controllers.Identities{Client: mgr.GetClient(), Reader: api, Cloud: cloud.New(armCfg)}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "identity-secret-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns.Name, Name: "sp-secret"}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}, Data: map[string][]byte{infrav1.ClientSecretKey: []byte("first")}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	id := &infrav1.AzureClusterIdentity{
		ObjectMeta: metav1.ObjectMeta{Name: "sp", Namespace: ns.Name},
		Spec: infrav1.AzureClusterIdentitySpec{Type: infrav1.ServicePrincipal, TenantID: tenant, ClientID: "00000000-0000-4000-8000-0000000000c1",
			ClientSecret: corev1.SecretReference{Name: key.Name}, AllowedNamespaces: &infrav1.AllowedNamespaces{}},
	}
	if err := env.Client.Create(ctx, id); err != nil {
		t.Fatal(err)
	}
	ac := &infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns.Name},
		Spec: infrav1.AzureClusterSpec{SubscriptionID: "00000000-0000-0000-0000-0000000000c1", IdentityRef: &infrav1.IdentityReference{Name: id.Name}}}
	read := func() (string, error) {
		c, _, err := ids.CloudProviderCredentials(ctx, ac)
		return c.ClientSecret, err
	}
	// cacheSees waits until the manager's cache has the Secret at a
	// version (gone with ""), so that what follows does not depend on how
	// soon its watch delivers.
	cacheSees := func(t *testing.T, version string) {
		t.Helper()
		poll.Until(t, 30*time.Second, func() string {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
			err := mgr.GetClient().Get(ctx, key, m)
			switch {
			case version == "" && apierrors.IsNotFound(err):
				return ""
			case err != nil:
				return err.Error()
			case m.ResourceVersion != version:
				return fmt.Sprintf("the cache has version %s of the Secret, want %q", m.ResourceVersion, version)
			}
			return ""
		})
	}
	// readsReach checks that many reads, concurrent as reconciles are,
	// return want and read the Secret's data no more.
	readsReach := func(t *testing.T, want string) {
		t.Helper()
		before := api.count(key)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					got, err := read()
					if err == nil && got != want {
						err = fmt.Errorf("read secret %q, want %q", got, want)
					}
					if err != nil {
						errs <- err
						return
					}
					if _, err := ids.Services(ctx, ac); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := api.count(key) - before; n != 0 {
			t.Fatalf("400 reads of an unchanged identity Secret made %d GETs to the API server, want none", n)
		}
	}

	t.Run("an unchanged Secret is read once", func(t *testing.T) {
		// The identity reaches the cache a moment after it is created.
		poll.Until(t, 30*time.Second, func() string {
			if _, err := read(); err != nil {
				return err.Error()
			}
			return ""
		})
		if n := api.count(key); n != 1 {
			t.Fatalf("the first read made %d GETs of the Secret, want 1", n)
		}
		readsReach(t, "first")
	})

	t.Run("a rotated Secret is used once the cache sees it", func(t *testing.T) {
		if err := env.Client.Get(ctx, key, secret); err != nil {
			t.Fatal(err)
		}
		secret.Data[infrav1.ClientSecretKey] = []byte("rotated")
		if err := env.Client.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		cacheSees(t, secret.ResourceVersion)
		before := api.count(key)
		if got, err := read(); err != nil || got != "rotated" {
			t.Fatalf("the read after the rotation returned %q, %v", got, err)
		}
		if n := api.count(key) - before; n != 1 {
			t.Fatalf("reading the rotated Secret made %d GETs, want 1", n)
		}
		readsReach(t, "rotated")
	})

	t.Run("a deleted Secret is IdentitySecretNotFound", func(t *testing.T) {
		if err := env.Client.Delete(ctx, secret); err != nil {
			t.Fatal(err)
		}
		cacheSees(t, "")
		_, err := read()
		if reason := controllers.IdentityErrorReason(err); reason != controllers.IdentitySecretNotFoundReason {
			t.Fatalf("reading a deleted identity Secret: reason %q, error %v", reason, err)
		}
		if want := fmt.Sprintf("Secret %s of AzureClusterIdentity %s/%s does not exist", key, ns.Name, id.Name); err.Error() != want {
			t.Fatalf("error %q, want %q", err, want)
		}
		// Created again, it is found at once, even before the cache
		// sees it, and then read no more.
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}, Data: map[string][]byte{infrav1.ClientSecretKey: []byte("recreated")}}
		if err := env.Client.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got, err := read(); err != nil || got != "recreated" {
			t.Fatalf("the read after the Secret was created again returned %q, %v", got, err)
		}
		cacheSees(t, secret.ResourceVersion)
		readsReach(t, "recreated")
	})

}
