package cli

import (
	"path/filepath"
	"testing"
	"time"
)

// TestLogsOptionsValidate: what logs cannot do is refused before the
// management cluster is asked, naming the flag; a --custom-cloud that does
// not parse among them, though it is read only on the Run Command path.
func TestLogsOptionsValidate(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "id_rsa")
	for _, c := range []struct {
		name   string
		change func(*logsOptions)
		want   string // "" for valid
	}{
		{"defaults", func(*logsOptions) {}, ""},
		{"run command", func(o *logsOptions) { o.via = viaRunCommand }, ""},
		{"a custom cloud", func(o *logsOptions) {
			o.customClouds = []string{"name=stack,arm=https://arm.local,entra=https://login.local"}
		}, ""},
		{"the same kubeconfig twice", func(o *logsOptions) { o.kubeconfig, o.mgmtKubeconfig = "m", "m" }, ""},
		{"a negative since", func(o *logsOptions) { o.since = -5 * time.Minute }, "--since -5m0s"},
		{"an unknown way", func(o *logsOptions) { o.via = "rdp" }, `--via "rdp"`},
		{"-o as a file", func(o *logsOptions) { o.oldOutput = "x.tar" }, "--write-to x.tar"},
		{"two kubeconfigs", func(o *logsOptions) { o.kubeconfig, o.mgmtKubeconfig = "a", "b" }, "name two kubeconfigs"},
		{"no user", func(o *logsOptions) { o.user = "" }, `--user ""`},
		{"a missing key file", func(o *logsOptions) { o.identities = []string{missing} }, "--identity " + missing},
		{"two local worlds", func(o *logsOptions) { o.local, o.stateDir = "demo", "/tmp/w" }, "--local demo and --state-dir /tmp/w"},
		{"a custom cloud without a name", func(o *logsOptions) { o.customClouds = []string{"arm=https://arm.local,entra=https://login.local"} }, "--custom-cloud"},
		{"a custom cloud that is no list", func(o *logsOptions) { o.customClouds = []string{"stack"} }, `--custom-cloud "stack": want name=NAME`},
	} {
		o := logsOptions{accessOptions: accessOptions{user: "capi"}, Node: "win-abcde", via: viaAuto}
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}
