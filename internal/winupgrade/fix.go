package winupgrade

import (
	"context"
	"strings"

	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// fix finds the tag of an image's repository that runs on the target,
// reading the candidates' manifest lists (the finder admission's reporter
// uses too); one lookup per image.
func (pl *planner) fix(ctx context.Context, image string) fixResult {
	if r, ok := pl.fixes[image]; ok {
		return r
	}
	use, err := pl.o.Resolver.FixTag(ctx, image, []string{pl.p.TargetBuild}, pl.o.MaxTagLookups)
	r := fixResult{use: use, err: err}
	pl.fixes[image] = r
	return r
}

// oldMarker reports whether s names a Windows Server release the cluster
// is leaving (one of the leaving builds, or its ltsc/year names).
func (pl *planner) oldMarker(s string) bool {
	for b := range pl.p.Leaving {
		if strings.Contains(s, b) || workload.NamesRelease(s, images.WindowsRelease(b)) {
			return true
		}
	}
	return false
}
