package controllers

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// members builds a pool from a spec per instance: its ID, then o (old
// model) or n (new), then r (node Ready) or u (not), then d when Cluster
// API marked it for deletion and f when Azure reports it Failed (and it is
// due for replacement): "0or 1or 2nu 3nuf".
func members(spec string) []poolMember {
	var out []poolMember
	for _, f := range strings.Fields(spec) {
		i := strings.IndexAny(f, "on")
		flags := f[i:]
		out = append(out, poolMember{ID: f[:i], Current: flags[0] == 'n', Ready: flags[1] == 'r', Marked: strings.Contains(flags, "d"), Failed: strings.Contains(flags, "f")})
	}
	return out
}

func TestSelectToDelete(t *testing.T) {
	surge1 := poolRollout{Replicas: 2, Surge: 1}
	for _, c := range []struct {
		name    string
		pool    string
		plan    poolRollout
		victims string
		desired int64
	}{
		{"settled", "0nr 1nr", surge1, "", 2},
		{"a new model surges first", "0or 1or", surge1, "", 3},
		// Finding 3 of issue 54: Azure provisioned the new instance, its
		// node is not Ready: no old node goes.
		{"a new instance without a Ready node deletes nothing", "0or 1or 2nu", surge1, "", 3},
		{"broken new instances keep the old nodes", "0or 1or 2nu 3nu", poolRollout{Replicas: 2, Surge: 2}, "", 4},
		{"a new Ready node lets one old one go", "0or 1or 2nr", surge1, "0", 3},
		{"two new Ready nodes let both old ones go", "0or 1or 2nr 3nr", poolRollout{Replicas: 2, Surge: 2}, "0,1", 4},
		{"maxUnavailable lets one old Ready node go before any new one is Ready", "0or 1or 2nu", poolRollout{Replicas: 2, Surge: 1, Unavailable: 1}, "0", 3},
		{"maxUnavailable 0 and no surge replaces nothing Ready", "0or 1or", poolRollout{Replicas: 2}, "", 2},
		{"an old instance without a Ready node goes while the count holds", "0ou 1or 2nu", surge1, "0", 3},
		{"old instances without nodes go one at a time", "0ou 1ou 2nu", surge1, "0", 3},
		{"old instances without nodes keep the count", "0ou 1ou", surge1, "", 3},
		{"a scale-down takes marked ones first", "0nr 1nrd 2nr 3nrd 4nr", poolRollout{Replicas: 2, Surge: 1}, "1,3,0", 2},
		{"a scale-down takes instances without a Ready node first", "0nr 1nr 2nu", poolRollout{Replicas: 2, Surge: 1}, "2", 2},
		{"a scale-down takes old models before the oldest", "0nr 1or 2nr", poolRollout{Replicas: 1, Surge: 1}, "1", 2},
		{"a marked instance within the count stays", "0nrd 1nr", surge1, "", 2},
		// A Failed instance goes whatever the count; the capacity stays,
		// so that the scale set makes its replacement.
		{"a failed instance at the pool's count is replaced", "0nr 1nuf", surge1, "1", 2},
		{"every failed instance goes at once", "0nuf 1nuf", surge1, "0,1", 2},
		{"a failed surge instance is replaced and the rollout goes on", "0or 1or 2nuf", surge1, "2", 3},
		{"a failed old instance goes outside the disruption budget", "0ouf 1or", surge1, "0", 3},
		{"a scale-down counts a failed instance's deletion", "0nr 1nuf 2nr", poolRollout{Replicas: 1, Surge: 1}, "1,0", 1},
		{"a failed marked instance goes once", "0nr 1nudf", surge1, "1", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			victims, desired := selectToDelete(members(c.pool), c.plan)
			if got := strings.Join(victims, ","); got != c.victims || desired != c.desired {
				t.Errorf("pool %q, %+v: delete %q, %d wanted; want delete %q, %d wanted", c.pool, c.plan, got, desired, c.victims, c.desired)
			}
		})
	}
}

// TestRolloutPlanNeverStalls: maxSurge and maxUnavailable that resolve to
// zero together (percentages, rounded) leave one instance unavailable, so
// that an old model can still be replaced; otherwise they resolve as
// given, and unset they are a surge of one.
func TestRolloutPlanNeverStalls(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int) *intstr.IntOrString { v := intstr.FromInt(n); return &v }
	for _, c := range []struct {
		name                string
		surge, unavailable  *intstr.IntOrString
		replicas            int64
		wantSurge, wantUnav int64
	}{
		{"unset", nil, nil, 3, 1, 0},
		{"0% and 25% of 3 round to nothing", pct("0%"), pct("25%"), 3, 0, 1},
		{"0 and 10% of 2", num(0), pct("10%"), 2, 0, 1},
		{"a surge of 10% of 3 rounds up", pct("10%"), num(0), 3, 1, 0},
		{"as given", num(2), num(1), 4, 2, 1},
		{"50% unavailable of 4", num(0), pct("50%"), 4, 0, 2},
	} {
		p := rolloutPlan(c.surge, c.unavailable, c.replicas)
		if p.Surge != c.wantSurge || p.Unavailable != c.wantUnav {
			t.Errorf("%s: surge %d, unavailable %d; want %d, %d", c.name, p.Surge, p.Unavailable, c.wantSurge, c.wantUnav)
		}
		// Whatever the plan, an old model is replaced: one instance at
		// a time goes or comes.
		pool := "0or 1or 2or"
		victims, desired := selectToDelete(members(pool), p)
		if len(victims) == 0 && desired == 3 {
			t.Errorf("%s: the rollout of %q stalls under %+v", c.name, pool, p)
		}
	}
}
