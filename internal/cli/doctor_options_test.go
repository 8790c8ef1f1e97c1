package cli

import (
	"testing"
	"time"
)

// TestDoctorOptionsValidate: a format doctor cannot write, a negative
// --cert-warning and two local worlds are refused before any cluster is
// asked, naming the flag.
func TestDoctorOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*doctorOptions)
		want   string // "" for valid
	}{
		{"defaults", func(*doctorOptions) {}, ""},
		{"json", func(o *doctorOptions) { o.output = "json" }, ""},
		{"a local world", func(o *doctorOptions) { o.local = "demo" }, ""},
		{"a state directory", func(o *doctorOptions) { o.stateDir = "/tmp/w" }, ""},
		{"YAML", func(o *doctorOptions) { o.output = "yaml" }, `--output "yaml": use one of text, json`},
		{"a negative certificate warning", func(o *doctorOptions) { o.certWarning = -time.Hour }, "--cert-warning -1h0m0s: want how long before its expiry"},
		{"two local worlds", func(o *doctorOptions) { o.local, o.stateDir = "demo", "/tmp/w" }, "--local demo and --state-dir /tmp/w both name a local world"},
	} {
		o := doctorCommandOptions{doctorOptions{output: "text", certWarning: 30 * 24 * time.Hour, azure: true}}
		c.change(&o.doctorOptions)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}
