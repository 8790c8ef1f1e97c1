package machines

import (
	"testing"

	"github.com/winkube/winkube/emulator/arm"
)

// The release a Windows machine runs, from each way its image is named:
// the community gallery's definitions say "win-2022", the marketplace's
// SKUs "windows-2022".
func TestWindowsReleaseOfEveryImageKind(t *testing.T) {
	for want, img := range map[string]arm.ImageReference{
		"2022": {CommunityGalleryImageID: "/CommunityGalleries/ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019/Images/capi-win-2022-containerd/Versions/1.36.3"},
		"2025": {CommunityGalleryImageID: "/CommunityGalleries/ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019/Images/capi-win-2025-containerd/Versions/1.36.3"},
		"2019": {Publisher: "cncf-upstream", Offer: "capi-windows", SKU: "k8s-1dot22dot1-windows-2019-containerd", Version: "2021.10.15"},
	} {
		if got, err := windowsReleaseOf(img); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %s", describe(img), got, err, want)
		}
	}
	if _, err := windowsReleaseOf(arm.ImageReference{CommunityGalleryImageID: "/CommunityGalleries/x/Images/capi-ubun2-2404/Versions/1.36.3"}); err == nil {
		t.Error("a Linux gallery image was given a Windows release")
	}
}
