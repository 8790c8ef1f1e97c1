package localworld_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/testenv"
)

// userImage is where the flannel flavors' Windows images, which the user
// builds, are said to be.
const userImage = "registry.example.com/platform/"

var imageLine = regexp.MustCompile(`(?m)^\s*-?\s*image:\s*"?([^\s"]+)`)

// TestCatalogHasEveryImageWinkubeDeploys: every image the flavors' add-ons
// and the examples use is published in the local world, so a pod of
// winkube's own never fails to pull there.
func TestCatalogHasEveryImageWinkubeDeploys(t *testing.T) {
	const version = "v1.36.3"
	known := map[string]bool{}
	for _, img := range localworld.Catalog(version, nil) {
		known[registry.Canonical(img.Ref)] = true
	}
	var streams []string
	for _, f := range []string{flavors.Windows, flavors.WindowsFlannel, flavors.MachinePoolWindows} {
		objs, err := flavors.Generate(f, flavors.Options{ClusterName: "c", KubernetesVersion: version, WindowsVersion: infrav1.WindowsServer2022, WindowsNodes: 1,
			Location: "westeurope", SubscriptionID: "00000000-0000-0000-0000-000000000001", SSHPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh t",
			FlannelWindowsImage: userImage + "flannel:1", KubeProxyWindowsImage: userImage + "kube-proxy:1",
			// The optional add-ons' images too.
			MetricsServer: true, AzureDiskCSI: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				for _, v := range cm.Data {
					streams = append(streams, v)
				}
			}
		}
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	for _, e := range examples {
		b, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, string(b))
	}
	seen := 0
	for _, s := range streams {
		for _, m := range imageLine.FindAllStringSubmatch(s, -1) {
			seen++
			if strings.HasPrefix(m[1], userImage) {
				continue // the user's own, published by the user
			}
			if !known[registry.Canonical(m[1])] {
				t.Errorf("image %s is used by winkube but not in the local world's catalog", m[1])
			}
		}
	}
	if seen < 8 {
		t.Fatalf("found only %d image references; the scan is broken", seen)
	}
	if strings.Count(strings.Join(streams, ""), "image:") != seen {
		t.Errorf("some image references were not parsed")
	}
}
