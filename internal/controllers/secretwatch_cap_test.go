package controllers_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/internal/controllers"
)

// TestSecretWatchIsCapped: a tenant naming ever more distinct identity
// Secrets does not make the manager open a watch for each; beyond the cap
// a Secret is read from the API server, with its current data.
func TestSecretWatchIsCapped(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "secretcap-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}) })
	done := make(chan struct{})
	defer close(done)
	w := controllers.NewSecretWatch(cs, done)
	if w.Max() != controllers.SecretWatchMax || controllers.SecretWatchMax <= 0 {
		t.Fatalf("a new SecretWatch's cap is %d, want %d", w.Max(), controllers.SecretWatchMax)
	}
	const capped, secrets = 3, 6
	w.SetMax(capped)
	ids := &controllers.Identities{Client: env.Client, Reader: env.Client, Watch: w}
	for i := range secrets {
		name := fmt.Sprintf("sp-%d", i)
		if _, err := cs.CoreV1().Secrets(ns.Name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string][]byte{"clientSecret": []byte("secret-" + name)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range secrets {
		key := types.NamespacedName{Namespace: ns.Name, Name: fmt.Sprintf("sp-%d", i)}
		s, err := ids.ReadSecret(ctx, key)
		if err != nil {
			t.Fatalf("reading Secret %s (the cap is %d): %v", key, capped, err)
		}
		if got := string(s.Data["clientSecret"]); got != "secret-"+key.Name {
			t.Errorf("Secret %s read %q", key, got)
		}
		if n := w.Watched(); n > capped {
			t.Fatalf("after reading %d Secrets, %d are watched: more than the cap %d", i+1, n, capped)
		}
	}
	if n := w.Watched(); n != capped {
		t.Errorf("%d Secrets watched, want the cap %d (the first ones read)", n, capped)
	}
	// Beyond the cap a read is the API server's: a rotation is seen at once.
	last := types.NamespacedName{Namespace: ns.Name, Name: fmt.Sprintf("sp-%d", secrets-1)}
	s, err := cs.CoreV1().Secrets(ns.Name).Get(ctx, last.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["clientSecret"] = []byte("rotated")
	if _, err := cs.CoreV1().Secrets(ns.Name).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := ids.ReadSecret(ctx, last); err != nil || string(got.Data["clientSecret"]) != "rotated" {
		t.Errorf("Secret %s beyond the cap after its rotation: %v, %v", last, got, err)
	}
	// Missing beyond the cap is still NotFound.
	if _, err := ids.ReadSecret(ctx, types.NamespacedName{Namespace: ns.Name, Name: "nope"}); err == nil {
		t.Error("a missing Secret beyond the cap was read")
	}
}
