// Package dotted orders dotted version strings: Azure's image versions
// (128.12.20240717), community-gallery versions and Kubernetes releases
// (1.31.10). It is the one comparison the ARM emulator, the image resolver
// and the images command share, so that what `winkube images list` shows
// as newest is what the resolver picks and what the emulator answers for
// "latest". It imports neither emulator/ nor internal/, which both import
// it.
package dotted

import (
	"strconv"
	"strings"
)

// Less says whether dotted version a orders before b. Parts are compared
// in turn: two numbers numerically (1.30.9 before 1.30.10, 007 equal to
// 7), a number before a part that is not one, two other parts as strings;
// when one version is a prefix of the other, the shorter is first (1.30
// before 1.30.0). A part that is not a number orders after every number,
// as SemVer 2.0.0 (section 11.4.3) orders identifiers, so the order is
// total and sort.Slice gets a strict weak order.
func Less(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		if c := comparePart(as[i], bs[i]); c != 0 {
			return c < 0
		}
	}
	return len(as) < len(bs)
}

func comparePart(a, b string) int {
	ai, aerr := strconv.ParseUint(a, 10, 64)
	bi, berr := strconv.ParseUint(b, 10, 64)
	switch {
	case aerr == nil && berr == nil:
		switch {
		case ai < bi:
			return -1
		case ai > bi:
			return 1
		}
		return 0
	case aerr == nil:
		return -1
	case berr == nil:
		return 1
	}
	return strings.Compare(a, b)
}
