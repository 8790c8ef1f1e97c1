package kubelet_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/internal/poll"
)

// TestConfigMapsAreWatchedNotRead covers the kubelet's ConfigMap reads:
// after a ConfigMap's own watch has listed it, reading it again and again
// (every container start reads those its environment and volumes name)
// costs the API server nothing, while a change or a deletion is seen, and
// a same-named ConfigMap of another namespace stays apart.
func TestConfigMapsAreWatchedNotRead(t *testing.T) {
	env := startAPIServer(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "calico-config", Namespace: ns}, Data: map[string]string{"veth_mtu": ns}}
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := &requests{n: map[string]int{}}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	client := kubelet.WatchedConfigMaps(counted(env.Config, c), done)
	read := func(ns string) (string, error) {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "calico-config", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data["veth_mtu"], nil
	}
	// Until its watch has listed it, a read may go to the API server.
	poll.Until(t, time.Minute, func() string {
		if _, err := read("team-a"); err != nil {
			return err.Error()
		}
		if c.get("WATCH configmaps") == 0 {
			return "waiting for the ConfigMap's watch"
		}
		return ""
	})
	gets := c.get("GET configmaps")
	for range 50 {
		got, err := read("team-a")
		if err != nil || got != "team-a" {
			t.Fatalf("read %q, %v; want team-a's ConfigMap", got, err)
		}
	}
	if n := c.get("GET configmaps") - gets; n != 0 {
		t.Errorf("50 reads of a watched ConfigMap sent %d GETs to the API server, want none", n)
	}
	if got, err := read("team-b"); err != nil || got != "team-b" {
		t.Fatalf("read %q, %v from team-b; want its own ConfigMap", got, err)
	}

	cm, err := admin.CoreV1().ConfigMaps("team-a").Get(ctx, "calico-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["veth_mtu"] = "1350"
	if _, err := admin.CoreV1().ConfigMaps("team-a").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if got, err := read("team-a"); err != nil || got != "1350" {
			return "waiting for the watch to bring the change: read " + got
		}
		return ""
	})
	if err := admin.CoreV1().ConfigMaps("team-a").Delete(ctx, "calico-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := read("team-a"); !apierrors.IsNotFound(err) {
			return "waiting for the deletion to be seen"
		}
		return ""
	})
}
