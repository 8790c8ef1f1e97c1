package localworld_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
)

// checkLoadedImage is issue 55's step: a team's Windows Server 2022 image,
// built here (random layers, a config with os.version 10.0.20348) and
// saved as `docker save` does, is loaded into the running world the way
// 'winkube image load' does it; a pod of it that names neither OS nor
// build is placed by admission on a Windows node of its build and runs
// the very image loaded.
func checkLoadedImage(ctx context.Context, t *testing.T, state string, cs kubernetes.Interface, start time.Time) {
	t.Helper()
	const ref = "example.com/team/winapp:1.0"
	img, err := random.Image(4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.OSVersion = "windows", "amd64", registry.Build2022
	cfg.Config.Entrypoint = []string{`C:\app\winapp.exe`}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(t.TempDir(), "winapp.tar")
	tag, _ := name.NewTag(ref)
	if err := tarball.WriteToFile(saved, tag, img); err != nil {
		t.Fatal(err)
	}
	loaded, err := localworld.LoadImages(ctx, state, []string{saved}, "", func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if len(loaded) != 1 || loaded[0].Ref != ref || loaded[0].Digest != want.String() {
		t.Fatalf("loaded %+v, want %s@%s", loaded, ref, want)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "winapp"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: ref}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "winapp", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
			return fmt.Sprintf("winapp on %q is %s", p.Spec.NodeName, p.Status.Phase)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if b := n.Labels["node.kubernetes.io/windows-build"]; n.Labels[corev1.LabelOSStable] != "windows" || b == "" || !strings.HasPrefix(registry.Build2022, b) {
			t.Fatalf("winapp runs on %s (%v), want a Windows 2022 node", n.Name, n.Labels)
		}
		if id := p.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(id, "@"+want.String()) {
			t.Fatalf("winapp runs image %s, want the loaded %s", id, want)
		}
		return ""
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, "winapp", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%6.1fs a loaded Windows 2022 image runs on a 2022 node", time.Since(start).Seconds())
}
