package cli

import (
	"path/filepath"
	"testing"
)

// TestSSHOptionsValidate: a login no node could take is refused before the
// management cluster is asked, naming the flag.
func TestSSHOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"id_ed25519": "key\n"})
	key, missing := filepath.Join(dir, "id_ed25519"), filepath.Join(dir, "id_rsa")
	for _, c := range []struct {
		name   string
		change func(*sshOptions)
		want   string // "" for valid
	}{
		{"defaults", func(*sshOptions) {}, ""},
		{"a key file", func(o *sshOptions) { o.identities = []string{key} }, ""},
		{"a local world", func(o *sshOptions) { o.local = "demo" }, ""},
		{"a state directory", func(o *sshOptions) { o.stateDir = dir }, ""},
		{"no user", func(o *sshOptions) { o.user = "" }, `--user "": name the user to log in as (capi`},
		{"a missing key file", func(o *sshOptions) { o.identities = []string{key, missing} }, "--identity " + missing},
		{"two local worlds", func(o *sshOptions) { o.local, o.stateDir = "demo", dir }, "--local demo and --state-dir " + dir + " both name a local world"},
	} {
		o := sshOptions{accessOptions: accessOptions{user: "capi"}, Node: "win-abcde", Command: []string{"hostname"}}
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}
