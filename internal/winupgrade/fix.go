package winupgrade

import (
	"context"
	"sort"
	"strings"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// markers are how image tags name a Windows Server release: Microsoft's
// images use ltsc2019/ltsc2022/ltsc2025 (and 1809 for 2019), others the
// build number.
var markers = map[infrav1.WindowsServerVersion][]string{
	infrav1.WindowsServer2019: {"ltsc2019", "1809", "17763", "2019"},
	infrav1.WindowsServer2022: {"ltsc2022", "20348", "2022"},
	infrav1.WindowsServer2025: {"ltsc2025", "26100", "2025"},
}

// splitTag splits "repo:tag" ("" for a digest or no tag).
func splitTag(image string) (repo, tag string) {
	if i := strings.Index(image, "@"); i >= 0 {
		return image[:i], ""
	}
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[:i], image[i+1:]
	}
	return image, ""
}

// candidates orders the repository's tags that may run on the target:
// the image's own tag with its release marker swapped for the target's
// first, then tags naming the target release, the ones most like the
// current tag before the others; for Windows Server 2025, tags of 2022
// (which 2025 hosts run) come after those of 2025.
func candidates(tag string, tags []string, target infrav1.WindowsServerVersion) []string {
	have := map[string]bool{}
	for _, t := range tags {
		have[t] = true
	}
	releases := []infrav1.WindowsServerVersion{target}
	if target == infrav1.WindowsServer2025 {
		releases = append(releases, infrav1.WindowsServer2022)
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
			for old, ms := range markers {
				if old == rel {
					continue
				}
				for _, m := range ms {
					if strings.Contains(tag, m) {
						for i, n := range markers[rel] {
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
			for _, m := range markers[rel] {
				if strings.Contains(t, m) {
					named = append(named, t)
					break
				}
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

// fix finds the tag of an image's repository that runs on the target,
// reading the candidates' manifest lists; one lookup per image.
func (pl *planner) fix(ctx context.Context, image string) fixResult {
	if r, ok := pl.fixes[image]; ok {
		return r
	}
	r := pl.findFix(ctx, image)
	pl.fixes[image] = r
	return r
}

func (pl *planner) findFix(ctx context.Context, image string) fixResult {
	repo, tag := splitTag(image)
	tags, err := pl.o.Resolver.Tags(ctx, image)
	if err != nil {
		return fixResult{err: err}
	}
	cands := candidates(tag, tags, pl.o.Target)
	if len(cands) > pl.o.MaxTagLookups {
		cands = cands[:pl.o.MaxTagLookups]
	}
	for _, t := range cands {
		plats, err := pl.o.Resolver.Platforms(ctx, repo+":"+t)
		if err == nil && workload.RunsOn(plats, pl.p.TargetBuild) {
			return fixResult{use: repo + ":" + t}
		}
	}
	return fixResult{}
}

// oldMarker reports whether s names a Windows Server release the cluster
// is leaving (one of the leaving builds, or its ltsc/year names).
func (pl *planner) oldMarker(s string) bool {
	for b := range pl.p.Leaving {
		rel := images.WindowsRelease(b)
		if strings.Contains(s, b) {
			return true
		}
		for _, m := range markers[rel] {
			if strings.Contains(s, m) {
				return true
			}
		}
	}
	return false
}
