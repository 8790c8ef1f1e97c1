package cli

import (
	"testing"
	"time"
)

// TestRehearseOptionsValidate: unknown classes and flags --delete would
// ignore are refused before the management cluster is asked.
func TestRehearseOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*rehearseOptions)
		want   string // "" for valid
	}{
		{"one class", func(o *rehearseOptions) { o.Args = []string{"expired-token"} }, ""},
		{"all", func(o *rehearseOptions) { o.Args = []string{"all"} }, ""},
		{"a timeout", func(o *rehearseOptions) { o.Args, o.timeout = []string{"wrong-ca-hash"}, time.Minute }, ""},
		{"a source", func(o *rehearseOptions) { o.Args, o.from = []string{"wrong-ca-hash"}, "md-win" }, ""},
		{"delete", func(o *rehearseOptions) { o.delete = true }, ""},
		{"no class", func(*rehearseOptions) {}, "name a class"},
		{"an unknown class", func(o *rehearseOptions) { o.Args = []string{"disk-full"} }, `"disk-full" is not a class`},
		{"a negative timeout", func(o *rehearseOptions) { o.Args, o.timeout = []string{"all"}, -time.Minute }, "--kubeadm-timeout -1m0s"},
		{"delete with a class", func(o *rehearseOptions) { o.delete, o.Args = true, []string{"all"} }, "name no class"},
		{"delete with a source", func(o *rehearseOptions) { o.delete, o.from = true, "md-win" }, "--machine-deployment md-win chooses what a new one copies"},
		{"delete with a timeout", func(o *rehearseOptions) { o.delete, o.timeout = true, time.Minute }, "--kubeadm-timeout 1m0s applies to a new one"},
	} {
		o := rehearseOptions{}
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}
