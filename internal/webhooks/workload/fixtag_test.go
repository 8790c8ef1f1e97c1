package workload_test

import (
	"context"
	"strings"
	"testing"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

func TestTagCandidatesSwapTheReleaseMarkerFirst(t *testing.T) {
	tags := []string{"latest", "ltsc2022", "nanoserver-ltsc2022", "windowsservercore-ltsc2019", "windowsservercore-ltsc2022", "windowsservercore-ltsc2025"}
	got := workload.TagCandidates("windowsservercore-ltsc2019", tags, []infrav1.WindowsServerVersion{infrav1.WindowsServer2022})
	if len(got) != 3 || got[0] != "windowsservercore-ltsc2022" || got[1] != "nanoserver-ltsc2022" {
		t.Errorf("2022 candidates %v", got)
	}
	got = workload.TagCandidates("1809", []string{"1809", "ltsc2022", "ltsc2025"}, workload.ImageReleasesFor([]string{"10.0.26100"}))
	if strings.Join(got, ",") != "ltsc2025,ltsc2022" {
		t.Errorf("2025 candidates %v, want ltsc2025 then ltsc2022", got)
	}
	if got := workload.TagCandidates("v1", []string{"v1", "v2"}, []infrav1.WindowsServerVersion{infrav1.WindowsServer2022}); len(got) != 0 {
		t.Errorf("tags naming no release: %v", got)
	}
}

// Images of the release that runs on the most remaining hosts come first:
// with 2022 and 2025 hosts, a 2022 image runs on both.
func TestImageReleasesFor(t *testing.T) {
	for hosts, want := range map[string]string{
		"10.0.20348":            "2022",
		"10.0.26100":            "2025,2022",
		"10.0.20348,10.0.26100": "2022,2025",
		"10.0.17763,10.0.20348": "2022,2019",
	} {
		var got []string
		for _, rel := range workload.ImageReleasesFor(strings.Split(hosts, ",")) {
			got = append(got, string(rel))
		}
		if strings.Join(got, ",") != want {
			t.Errorf("hosts %s: releases %v, want %s", hosts, got, want)
		}
	}
}

// The finder reads the registry: the ltsc2019 image's replacement on 2022
// hosts is the same repository's ltsc2022 tag.
func TestFixTagReadsTheRepository(t *testing.T) {
	got, err := adm.Resolver.FixTag(context.Background(), imgCore2019, []string{"10.0.20348"}, 0)
	if err != nil || got != imgCore2022 {
		t.Fatalf("fix for %s: %q, %v; want %s", imgCore2019, got, err, imgCore2022)
	}
	got, err = adm.Resolver.FixTag(context.Background(), imgCore2019, []string{"10.0.30000"}, 0)
	if err != nil || got != "" {
		t.Fatalf("fix for an unknown build: %q, %v", got, err)
	}
}
