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
// services of type LoadBalancer front the web ones, and the disk example's
// claim asks the Azure Disk CSI add-on's class.
func TestExamples(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"iis.yaml":          {"iis-2022": "windows"},
		"mixed.yaml":        {"frontend": "linux", "backend": "windows"},
		"windows-disk.yaml": {"iis-disk": "windows"},
	}
	wantLBs := map[string]int{"iis.yaml": 1, "mixed.yaml": 1}
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
			case *corev1.PersistentVolumeClaim:
				if o.Spec.StorageClassName == nil || *o.Spec.StorageClassName != "managed-csi" {
					t.Errorf("%s: claim %s's class is %v, want the add-on's managed-csi", file, o.Name, o.Spec.StorageClassName)
				}
			}
		}
		if lbs != wantLBs[file] {
			t.Errorf("%s has %d LoadBalancer Services, want %d", file, lbs, wantLBs[file])
		}
	}
}
