package localworld

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// TestUpstreamTestImagesAreAdmittedOnWindows: the world's admission, reading
// the world's registry as it does in a world, places a Windows pod of the
// pause image (the e2e's, and the sandboxes') and of the e2e's agnhost,
// busybox and nginx on Windows nodes of the builds they were published for,
// where it used to refuse pause ("every image of the pod runs only on
// linux": the registry held a Linux-only pause) and could not read the
// others (not in the registry). A Linux pod of the same images goes to
// Linux.
func TestUpstreamTestImagesAreAdmittedOnWindows(t *testing.T) {
	ctx := context.Background()
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	// kubeadm v1.36's list names pause:3.10.2.
	if err := reg.PushAll(ctx, Catalog(KubernetesVersion, []string{"registry.k8s.io/kube-proxy:" + KubernetesVersion, "registry.k8s.io/pause:3.10.2"})); err != nil {
		t.Fatal(err)
	}
	r := workload.NewResolver()
	r.Mirror = reg.Host()
	for _, tc := range []struct {
		image  string
		builds []string
	}{
		{"registry.k8s.io/pause:3.10.2", []string{"10.0.17763", "10.0.20348", "10.0.26100"}},
		{"registry.k8s.io/pause:3.10", []string{"10.0.17763", "10.0.20348", "10.0.26100"}},
		{"registry.k8s.io/e2e-test-images/agnhost:2.63.0", []string{"10.0.17763", "10.0.20348", "10.0.26100"}},
		{"registry.k8s.io/e2e-test-images/busybox:1.37.0-1", []string{"10.0.17763", "10.0.20348", "10.0.26100"}},
		{"registry.k8s.io/e2e-test-images/nginx:1.15-4", []string{"10.0.17763", "10.0.20348", "10.0.26100"}},
	} {
		for _, osName := range []string{"windows", "linux"} {
			// As the e2e writes its Windows pods: the OS's node
			// selector (and spec.os).
			spec := &corev1.PodSpec{NodeSelector: map[string]string{corev1.LabelOSStable: osName}, OS: &corev1.PodOS{Name: corev1.OSName(osName)},
				Containers: []corev1.Container{{Name: "c", Image: tc.image}}}
			pl, ferr := workload.Place(ctx, r, spec, field.NewPath("spec"))
			if ferr != nil || len(pl.Unresolved) > 0 {
				t.Errorf("%s on %s: placement %+v, %v", tc.image, osName, pl, ferr)
				continue
			}
			if pl.OS != "" {
				t.Errorf("%s: placed on %q only, want an image of both OSes", tc.image, pl.OS)
			}
			if _, ferr := workload.Apply(pl, &metav1.ObjectMeta{}, spec, field.NewPath("spec"), false); ferr != nil {
				t.Errorf("%s on %s: refused: %v", tc.image, osName, ferr)
			}
		}
		plats, err := r.Platforms(ctx, tc.image)
		if err != nil {
			t.Fatal(err)
		}
		var builds []string
		for _, p := range plats {
			if p.OS == "windows" && !slices.Contains(builds, p.WindowsBuild()) {
				builds = append(builds, p.WindowsBuild())
			}
		}
		// A Windows pod then goes to the builds its variants run on
		// (2025 hosts also run 2022 images).
		var runs []string
		for _, h := range tc.builds {
			if workload.RunsOn(plats, h) {
				runs = append(runs, h)
			}
		}
		if !slices.Equal(runs, tc.builds) || len(builds) == 0 {
			t.Errorf("%s: Windows variants %v run on %v, want %v", tc.image, builds, runs, tc.builds)
		}
	}
}
