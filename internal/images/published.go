package images

import "fmt"

// NewestPublished is the newest Kubernetes release winkube knows reference
// node images for (Cluster API Provider Azure's community gallery and the
// cncf-upstream marketplace offers publish one image version per Kubernetes
// patch release, after the release). A newer version would resolve to no
// image on Azure, so it is refused before anything is created.
var NewestPublished = Version{Major: 1, Minor: 36, Patch: 3}

// OldestPublished is the oldest release with reference images.
var OldestPublished = Version{Major: 1, Minor: 18, Patch: 0}

// CheckPublished refuses a Kubernetes version outside the releases that have
// reference images, naming the newest (or oldest) there is.
func CheckPublished(v Version) error {
	if v.newerThan(NewestPublished) {
		return fmt.Errorf("Kubernetes %s has no reference node images yet: the newest winkube knows is %s", v, NewestPublished)
	}
	if OldestPublished.newerThan(v) {
		return fmt.Errorf("Kubernetes %s is older than any reference node image: the oldest is %s", v, OldestPublished)
	}
	return nil
}

func (v Version) newerThan(o Version) bool {
	if v.Major != o.Major {
		return v.Major > o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor > o.Minor
	}
	return v.Patch > o.Patch
}
