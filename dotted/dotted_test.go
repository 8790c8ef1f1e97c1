package dotted

import (
	"sort"
	"testing"
)

// TestLess: the cases where the three comparators it replaces differed
// are marked; "images list" compared parts that are not numbers as 0, the
// emulator and the resolver as strings even against numbers.
func TestLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{
		{"1.30.9", "1.30.10", true},
		{"1.30.10", "1.30.9", false},
		{"128.9.20250101", "128.12.20240717", true},
		{"1.30", "1.30.0", true},
		{"1.30.0", "1.30", false},
		{"1.31.1", "1.31.1", false},
		{"1.007", "1.7", false},
		{"1.7", "1.007", false},
		// Differed: "images list" took "x" for 0 and found 1.31.x equal
		// to 1.31.0, so which one was newest depended on the listing.
		{"1.31.0", "1.31.x", true},
		{"1.31.x", "1.31.0", false},
		// Differed: the emulator and the resolver compared "10" and "1a"
		// as strings ("10" first) and "9" and "1a" as strings ("1a"
		// first), with 9 before 10: no order at all. A number is first.
		{"10", "1a", true},
		{"1a", "9", false},
		{"9", "10", true},
		{"1.31.0-rc", "1.31.0-rd", true},
	} {
		if got := Less(tc.a, tc.b); got != tc.less {
			t.Errorf("Less(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.less)
		}
	}
	vs := []string{"1a", "10", "9", "1.31.x", "1.31.0", "1.30.10", "1.30.9"}
	sort.Slice(vs, func(i, j int) bool { return Less(vs[i], vs[j]) })
	want := []string{"1.30.9", "1.30.10", "1.31.0", "1.31.x", "9", "10", "1a"}
	for i := range want {
		if vs[i] != want[i] {
			t.Fatalf("sorted %q, want %q", vs, want)
		}
	}
}
