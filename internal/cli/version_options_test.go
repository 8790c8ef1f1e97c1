package cli

import "testing"

// TestVersionOptionsValidate: version writes its three formats and the
// one-line form; anything else is bad input naming them.
func TestVersionOptionsValidate(t *testing.T) {
	for _, c := range []struct{ output, want string }{
		{"", ""},
		{"short", ""},
		{"json", ""},
		{"yaml", ""},
		{"xml", `--output "xml": use one of short, json, yaml`},
		{"v.json", "to write a file use --write-to v.json"},
	} {
		o := versionOptions{Output: c.output}
		wantBadInput(t, "-o "+c.output, o.Validate(), c.want)
	}
}
