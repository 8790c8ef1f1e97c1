package workload

import (
	"context"
	"sort"
	"strings"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
)

// releaseMarkers are how image tags name a Windows Server release:
// Microsoft's images use ltsc2019/ltsc2022/ltsc2025 (and 1809 for 2019),
// others the build number.
var releaseMarkers = map[infrav1.WindowsServerVersion][]string{
	infrav1.WindowsServer2019: {"ltsc2019", "1809", "17763", "2019"},
	infrav1.WindowsServer2022: {"ltsc2022", "20348", "2022"},
	infrav1.WindowsServer2025: {"ltsc2025", "26100", "2025"},
}

// NamesRelease reports whether s (a tag, a label value) names Windows
// Server release rel.
func NamesRelease(s string, rel infrav1.WindowsServerVersion) bool {
	for _, m := range releaseMarkers[rel] {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// SplitTag splits "repo:tag" ("" for a digest or no tag).
func SplitTag(image string) (repo, tag string) {
	if i := strings.Index(image, "@"); i >= 0 {
		return image[:i], ""
	}
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[:i], image[i+1:]
	}
	return image, ""
}

// ImageReleasesFor are the Windows Server releases whose images run on at
// least one of the host builds: those running on the most of the hosts
// first, then the newest.
func ImageReleasesFor(hosts []string) []infrav1.WindowsServerVersion {
	count := map[infrav1.WindowsServerVersion]int{}
	for rel, b := range images.WindowsBuild {
		for _, h := range images.HostsRunning(b) {
			if contains(hosts, h) {
				count[rel]++
			}
		}
	}
	var out []infrav1.WindowsServerVersion
	for rel := range count {
		out = append(out, rel)
	}
	sort.Slice(out, func(i, j int) bool {
		if count[out[i]] != count[out[j]] {
			return count[out[i]] > count[out[j]]
		}
		return out[i] > out[j]
	})
	return out
}

// TagCandidates orders the repository's tags that may run on the releases
// (in their order): for each release, the image's own tag with its release
// marker swapped for the release's first, then tags naming the release,
// the ones most like the current tag before the others.
func TagCandidates(tag string, tags []string, releases []infrav1.WindowsServerVersion) []string {
	have := map[string]bool{}
	for _, t := range tags {
		have[t] = true
	}
	seen := map[string]bool{}
	var out []string
	addOnce := func(t string) {
		if have[t] && !seen[t] && t != tag {
			seen[t] = true
			out = append(out, t)
		}
	}
	for _, rel := range releases {
		// Tags are compared with the image's own tag as it would read
		// for the release ("windowsservercore-ltsc2022").
		like := tag
		if tag != "" {
			for old, ms := range releaseMarkers {
				if old == rel {
					continue
				}
				for _, m := range ms {
					if strings.Contains(tag, m) {
						for i, n := range releaseMarkers[rel] {
							swapped := strings.Replace(tag, m, n, 1)
							if i == 0 && like == tag {
								like = swapped
							}
							addOnce(swapped)
						}
					}
				}
			}
		}
		var named []string
		for _, t := range tags {
			if NamesRelease(t, rel) {
				named = append(named, t)
			}
		}
		sort.SliceStable(named, func(i, j int) bool {
			a, b := likeness(like, named[i]), likeness(like, named[j])
			if a != b {
				return a > b
			}
			return named[i] < named[j]
		})
		for _, t := range named {
			addOnce(t)
		}
	}
	return out
}

// likeness counts the characters a and b share at their start and end.
func likeness(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	m := 0
	for m < len(a)-n && m < len(b)-n && a[len(a)-1-m] == b[len(b)-1-m] {
		m++
	}
	return n + m
}

// FixTag finds the image of the same repository as image that runs on one
// of the Windows host builds: it lists the repository's tags and reads the
// platforms of at most max candidates (20 when max is 0); "" when none
// runs there.
func (r *Resolver) FixTag(ctx context.Context, image string, hosts []string, max int) (string, error) {
	if max == 0 {
		max = 20
	}
	repo, tag := SplitTag(image)
	tags, err := r.Tags(ctx, image)
	if err != nil {
		return "", err
	}
	cands := TagCandidates(tag, tags, ImageReleasesFor(hosts))
	if len(cands) > max {
		cands = cands[:max]
	}
	for _, t := range cands {
		plats, err := r.Platforms(ctx, repo+":"+t)
		if err != nil {
			continue
		}
		for _, h := range hosts {
			if RunsOn(plats, h) {
				return repo + ":" + t, nil
			}
		}
	}
	return "", nil
}
