package cli

import "testing"

// TestPlanOptionsValidate: both plans refuse, before any cluster is asked,
// what they cannot plan or write, and two local worlds at once.
func TestPlanOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*planOptions)
		want   string // "" for valid
	}{
		{"2022", func(*planOptions) {}, ""},
		{"2025 as YAML", func(o *planOptions) { o.to, o.output = "2025", "yaml" }, ""},
		{"no release", func(o *planOptions) { o.to = "" }, "--to is required"},
		{"back to 2019", func(o *planOptions) { o.to = "2019" }, "--to 2019: Windows Server 2019 is the release clusters are leaving"},
		{"XML", func(o *planOptions) { o.output = "xml" }, `--output "xml"`},
		{"pools mixed into JSON", func(o *planOptions) { o.writeTo, o.output = "-", "json" }, "would mix with -o json"},
		{"two local worlds", func(o *planOptions) { o.local, o.stateDir = "demo", "/tmp/w" }, "--local demo and --state-dir /tmp/w"},
	} {
		o := planOptions{doctorOptions: doctorOptions{output: "text"}, to: "2022"}
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
	for _, c := range []struct {
		name   string
		change func(*planUpgradeOptions)
		want   string // "" for valid
	}{
		{"a version", func(*planUpgradeOptions) {}, ""},
		{"apply", func(o *planUpgradeOptions) { o.apply = true }, ""},
		{"no version", func(o *planUpgradeOptions) { o.to = "" }, "--to is required"},
		{"not a version", func(o *planUpgradeOptions) { o.to = "latest" }, "latest"},
		{"apply as JSON", func(o *planUpgradeOptions) { o.apply, o.output = true, "json" }, "--apply prints its progress as text"},
		{"two local worlds", func(o *planUpgradeOptions) { o.local, o.stateDir = "demo", "/tmp/w" }, "--local demo and --state-dir /tmp/w"},
	} {
		o := planUpgradeOptions{doctorOptions: doctorOptions{output: "text"}, to: "v1.36.3"}
		c.change(&o)
		wantBadInput(t, "plan upgrade: "+c.name, o.Validate(), c.want)
	}
}
