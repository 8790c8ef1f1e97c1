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
	"k8s.io/utils/ptr"

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

// checkHostProcessJobs: HostProcess pods of restartPolicy Never whose
// command completes end as on a node: `cmd /c exit 3` Failed with exit
// code 3, `powershell -Command "exit 0"` Succeeded.
func checkHostProcessJobs(ctx context.Context, t *testing.T, cs kubernetes.Interface, start time.Time) {
	t.Helper()
	const base = "mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0"
	jobs := map[string]struct {
		command []string
		phase   corev1.PodPhase
		code    int32
	}{
		"hp-exit-3": {[]string{"cmd", "/c", "exit 3"}, corev1.PodFailed, 3},
		"hp-exit-0": {[]string{"powershell", "-Command", "exit 0"}, corev1.PodSucceeded, 0},
	}
	for name, j := range jobs {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, HostNetwork: true,
			NodeSelector: map[string]string{corev1.LabelOSStable: "windows"},
			SecurityContext: &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{
				HostProcess: ptr.To(true), RunAsUserName: ptr.To(`NT AUTHORITY\SYSTEM`)}},
			Containers: []corev1.Container{{Name: "job", Image: base, Command: j.command}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 2*time.Minute, func() string {
		for name, j := range jobs {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning {
				var evs []string
				if el, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}); err == nil {
					for _, e := range el.Items {
						evs = append(evs, e.Reason+": "+e.Message)
					}
				}
				return fmt.Sprintf("%s on %q is %s: conditions %+v, containers %+v, events %q", name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses, evs)
			}
			if len(p.Status.ContainerStatuses) != 1 {
				return fmt.Sprintf("%s has no container status", name)
			}
			term := p.Status.ContainerStatuses[0].State.Terminated
			if p.Status.Phase != j.phase || term == nil || term.ExitCode != j.code {
				t.Fatalf("%s ended %s with %+v, want %s with exit code %d", name, p.Status.Phase, term, j.phase, j.code)
			}
		}
		return ""
	})
	for name := range jobs {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%6.1fs HostProcess pods whose command completes end with its code", time.Since(start).Seconds())
}
