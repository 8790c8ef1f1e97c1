package cli

import (
	"testing"
	"time"
)

// TestBenchOptionsValidate: a format, a steady window, a timeout or a size no world
// could be measured with is refused before any binary is looked for, as bad
// input naming the flag and what to write instead.
func TestBenchOptionsValidate(t *testing.T) {
	valid := func() benchOptions {
		return benchOptions{output: "table", sizes: []string{"1+1+2", "1+5+20"}, steady: 30 * time.Second, timeout: 20 * time.Minute}
	}
	for _, c := range []struct {
		name   string
		change func(*benchOptions)
		want   string // "" for valid
	}{
		{"defaults", func(*benchOptions) {}, ""},
		{"json without a steady window", func(o *benchOptions) { o.output, o.steady = "json", 0 }, ""},
		{"three control planes", func(o *benchOptions) { o.sizes = []string{"3+0+1"} }, ""},
		{"an unknown format", func(o *benchOptions) { o.output = "csv" }, `--output "csv": use one of table, json`},
		{"a negative window", func(o *benchOptions) { o.steady = -time.Second }, "--steady -1s: want a duration of zero or more, such as 30s"},
		{"no time to run", func(o *benchOptions) { o.timeout = 0 }, "--timeout 0s: want a duration above zero, such as 45m"},
		{"two numbers", func(o *benchOptions) { o.sizes = []string{"1+1"} }, `--size "1+1"`},
		{"not a number", func(o *benchOptions) { o.sizes = []string{"1+x+1"} }, `--size "1+x+1"`},
		{"an even control plane", func(o *benchOptions) { o.sizes = []string{"1+1+2", "2+0+0"} }, `--size "2+0+0": --control-plane-nodes 2: want an odd number`},
	} {
		o := valid()
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}
