package flavors_test

import (
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/internal/testenv"
)

// The examples decode strictly, and every Deployment is pinned to an OS;
// services of type LoadBalancer front them.
func TestExamples(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"iis.yaml":   {"iis-2022": "windows"},
		"mixed.yaml": {"frontend": "linux", "backend": "windows"},
	}
	for file, deployments := range want {
		data, err := os.ReadFile(filepath.Join(root, "examples", file))
		if err != nil {
			t.Fatal(err)
		}
		var lbs int
		for _, obj := range decodeStrict(t, data) {
			switch o := obj.(type) {
			case *appsv1.Deployment:
				if got := o.Spec.Template.Spec.NodeSelector[corev1.LabelOSStable]; got != deployments[o.Name] {
					t.Errorf("%s: Deployment %s runs on %q, want %q", file, o.Name, got, deployments[o.Name])
				}
			case *corev1.Service:
				if o.Spec.Type == corev1.ServiceTypeLoadBalancer {
					lbs++
				}
			}
		}
		if lbs != 1 {
			t.Errorf("%s has %d LoadBalancer Services, want 1", file, lbs)
		}
	}
}
