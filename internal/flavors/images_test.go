package flavors_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
)

var emittedImage = regexp.MustCompile(`(?m)^\s*-?\s*image:\s*"?([^\s"]+)`)

// TestEveryEmittedImageIsPublished: every image any flavor's add-ons run
// is in the table of published add-on images, with its source; only the
// images the user names (flannel on Windows) are not.
func TestEveryEmittedImageIsPublished(t *testing.T) {
	seen := 0
	generated := 0
	// The references in a ConfigMap's data, scanned once per distinct
	// data: the same half megabyte of Calico's CRDs comes with every
	// combination, and the regexp over it was most of this test's time.
	// Every reference is still checked for every combination.
	refsIn := map[string][]string{}
	refs := func(data string) []string {
		if r, ok := refsIn[data]; ok {
			return r
		}
		var r []string
		for _, m := range emittedImage.FindAllStringSubmatch(data, -1) {
			r = append(r, m[1])
		}
		refsIn[data] = r
		return r
	}
	for _, flavor := range flavors.Names() {
		// Every Kubernetes minor a flavor accepts: each image must be
		// published for the version it is emitted for.
		for minor := 22; minor <= 36; minor++ {
			version := fmt.Sprintf("v1.%d.5", minor)
			o := opts(version, infrav1.WindowsServer2019)
			o.MetricsServer = true // the optional add-ons' images too
			o.AzureDiskCSI = true
			objs, err := flavors.Generate(flavor, o)
			if err != nil {
				continue // refused, saying why (TestEveryFlavorVersionAndWindowsRelease)
			}
			generated++
			for _, obj := range objs {
				cm, ok := obj.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				for _, data := range cm.Data {
					for _, ref := range refs(data) {
						seen++
						if ref == userFlannelImage || ref == userKubeProxyImage {
							continue
						}
						if ref == flavors.AdmissionImage() {
							// The test binary is a development build: its
							// admission image is the local world's, never
							// a tag the release repository lacks.
							if strings.HasPrefix(ref, flavors.AdmissionImageRepository+":") {
								t.Errorf("a development build emits %s, which no release pushed", ref)
							}
							continue
						}
						if img, ok := flavors.PublishedAddonImage(ref); !ok || img.Source == "" {
							t.Errorf("flavor %s (%s) emits %s, which the table of published add-on images does not have", flavor, version, ref)
						}
					}
				}
			}
		}
	}
	if generated < 40 {
		t.Fatalf("only %d flavor and version combinations generated", generated)
	}
	if seen < 20 {
		t.Fatalf("only %d image references found: the scan is broken", seen)
	}
	// What is known not to be published is refused by the table.
	for _, ref := range []string{
		"docker.io/sigwindowstools/flannel:v0.25.6-hostprocess",
		"docker.io/sigwindowstools/kube-proxy:v1.36.3-flannel-hostprocess",
		"docker.io/sigwindowstools/kube-proxy:v1.30.1-calico-hostprocess", // before the daily sync (1.33)
		"docker.io/calico/node-windows:v3.28.2",
	} {
		if _, ok := flavors.PublishedAddonImage(ref); ok {
			t.Errorf("%s is in the table of published images", ref)
		}
	}
}

// TestAdmissionImageOfABuild: only a release's tag names the published
// manager image; a development build or a Go pseudo-version names the
// image only the local world's registry serves.
func TestAdmissionImageOfABuild(t *testing.T) {
	for v, want := range map[string]string{
		"v0.4.2":                             "ghcr.io/winkube/winkube-manager:v0.4.2",
		"v1.0.0-rc.1":                        "ghcr.io/winkube/winkube-manager:v1.0.0-rc.1",
		"v0.0.0-dev":                         flavors.AdmissionLocalRepository + ":v0.0.0-dev",
		"v0.4.3-0.20261127101010-abcdef0123": flavors.AdmissionLocalRepository + ":v0.4.3-0.20261127101010-abcdef0123",
		"v0.4.2+dirty":                       flavors.AdmissionLocalRepository + ":v0.4.2_dirty",
	} {
		if got := flavors.AdmissionImageFor(v); got != want {
			t.Errorf("winkube %s: admission image %s, want %s", v, got, want)
		}
	}
}

// TestFlannelFlavorsNeedTheUsersImages: no flannel image for Windows is
// published, so the flannel flavors say so and what to pass.
func TestFlannelFlavorsNeedTheUsersImages(t *testing.T) {
	for _, flavor := range []string{flavors.WindowsFlannel, flavors.WindowsHostGW} {
		o := opts("v1.36.3", infrav1.WindowsServer2022)
		o.FlannelWindowsImage = ""
		_, err := flavors.Generate(flavor, o)
		if err == nil || !strings.Contains(err.Error(), "--flannel-windows-image") || !strings.Contains(err.Error(), "no flannel image for Windows nodes is published") {
			t.Errorf("%s without the user's flannel image: %v", flavor, err)
		}
	}
}

// TestHostGWRoutesPodsThroughAzure: host-gw carries pod addresses
// unencapsulated, so the cloud controller programs a route per node's pod
// CIDR and every NIC forwards; the overlay flavors need neither.
func TestHostGWRoutesPodsThroughAzure(t *testing.T) {
	for flavor, routed := range map[string]bool{flavors.WindowsHostGW: true, flavors.Windows: false, flavors.WindowsFlannel: false} {
		objs, err := flavors.Generate(flavor, opts("v1.36.3", infrav1.WindowsServer2022))
		if err != nil {
			t.Fatal(err)
		}
		templates, ccm := 0, false
		for _, o := range objs {
			switch obj := o.(type) {
			case *infrav1.AzureMachineTemplate:
				templates++
				if obj.Spec.Template.Spec.EnableIPForwarding != routed {
					t.Errorf("%s: template %s enableIPForwarding %v", flavor, obj.Name, obj.Spec.Template.Spec.EnableIPForwarding)
				}
			case *corev1.ConfigMap:
				for _, data := range obj.Data {
					if strings.Contains(data, "--configure-cloud-routes="+map[bool]string{true: "true", false: "false"}[routed]) {
						ccm = true
					}
				}
			}
		}
		if templates < 2 || !ccm {
			t.Errorf("%s: %d templates, cloud routes %v as expected: %v", flavor, templates, routed, ccm)
		}
	}
}
