package machines

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/winkube/winkube/emulator/arm"
)

// Windows Server releases and the builds their nodes report.
var windowsBuilds = map[string]struct{ build, revision, name string }{
	"2019": {"10.0.17763", "6532", "Windows Server 2019 Datacenter"},
	"2022": {"10.0.20348", "2849", "Windows Server 2022 Datacenter"},
	"2025": {"10.0.26100", "2314", "Windows Server 2025 Datacenter"},
}

var serverSKU = regexp.MustCompile(`^(2019|2022|2025)-`)

var windowsRelease = regexp.MustCompile(`(?i)win(?:dows)?-?(2019|2022|2025)`)

// windowsReleaseOf reads the Windows Server release from the image: the
// SKU (windows-2022-containerd-gen1, k8s-1dot22dot1-windows-2019-...) or
// a gallery image's definition name (capi-win-2022-containerd).
func windowsReleaseOf(img arm.ImageReference) (string, error) {
	// Microsoft's own images name the release first in their SKU
	// (2022-datacenter-g2), as 'az vm image list --publisher
	// MicrosoftWindowsServer' shows.
	if m := serverSKU.FindStringSubmatch(img.SKU); m != nil && strings.EqualFold(img.Publisher, "MicrosoftWindowsServer") {
		return m[1], nil
	}
	for _, s := range []string{img.SKU, img.ID, img.CommunityGalleryImageID, img.SharedGalleryImageID, img.Offer} {
		if m := windowsRelease.FindStringSubmatch(s); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("the image %s names no Windows Server release (2019, 2022 or 2025); the machine runtime cannot tell which build the node runs", describe(img))
}

func describe(img arm.ImageReference) string {
	switch {
	case img.ID != "":
		return img.ID
	case img.CommunityGalleryImageID != "":
		return img.CommunityGalleryImageID
	case img.SharedGalleryImageID != "":
		return img.SharedGalleryImageID
	}
	return strings.Join([]string{img.Publisher, img.Offer, img.SKU, img.Version}, ":")
}

var (
	marketplaceVersion = regexp.MustCompile(`^(\d)(\d{2})\.(\d+)\.\d+$`) // 136.3.20250101
	oldStyleSKU        = regexp.MustCompile(`k8s-(\d+)dot(\d+)dot(\d+)`)
	galleryVersion     = regexp.MustCompile(`(?i)/versions/v?(\d+\.\d+\.\d+)$`)
)

// kubeletVersionOf is the Kubernetes version baked into the image, as the
// reference images encode it; "" when the image does not say.
func kubeletVersionOf(img arm.ImageReference) string {
	if m := marketplaceVersion.FindStringSubmatch(img.Version); m != nil {
		minor, _ := strconv.Atoi(m[2])
		return fmt.Sprintf("v%s.%d.%s", m[1], minor, m[3])
	}
	if m := oldStyleSKU.FindStringSubmatch(img.SKU); m != nil {
		return fmt.Sprintf("v%s.%s.%s", m[1], m[2], m[3])
	}
	for _, id := range []string{img.ID, img.CommunityGalleryImageID, img.SharedGalleryImageID} {
		if m := galleryVersion.FindStringSubmatch(id); m != nil {
			return "v" + m[1]
		}
	}
	return ""
}

// capacity is what the kubelet reports of the VM size.
func capacity(m arm.Machine) corev1.ResourceList {
	cpus, mem := m.VCPUs, m.MemoryGB
	if cpus == 0 {
		cpus, mem = 2, 8
	}
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(cpus), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(int64(mem*1024*1024*1024), resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(110, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("128Gi"),
	}
}

// zoneLabel is the topology zone Azure's cloud provider reports: region
// and zone, or "0" for a VM in no zone.
func zoneLabel(m arm.Machine) string {
	if m.Zone == "" {
		return "0"
	}
	return strings.ToLower(m.Location) + "-" + m.Zone
}
