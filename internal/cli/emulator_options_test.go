package cli

import (
	"testing"
	"time"
)

// TestEmulatorOptionsValidate: flags no emulator could run with are
// refused before anything listens, as bad input (exit code 2) naming the
// flag and what to write instead.
func TestEmulatorOptionsValidate(t *testing.T) {
	valid := func() emulatorOptions {
		return emulatorOptions{listen: "127.0.0.1:8443", entraListen: "127.0.0.1:8444", operationDelay: 100 * time.Millisecond,
			bootDelayLinux: time.Second, bootDelayWindows: 3 * time.Second, saveEvery: 30 * time.Second}
	}
	for _, c := range []struct {
		name   string
		change func(*emulatorOptions)
		want   string // "" for valid
	}{
		{"defaults", func(*emulatorOptions) {}, ""},
		{"free ports", func(o *emulatorOptions) { o.listen, o.entraListen = "127.0.0.1:0", ":0" }, ""},
		{"no delays", func(o *emulatorOptions) { o.operationDelay, o.bootDelayLinux, o.bootDelayWindows = 0, 0, 0 }, ""},
		{"budgets", func(o *emulatorOptions) { o.readsPerHour, o.writesPerHour = 12000, 1200 }, ""},
		{"a negative write budget", func(o *emulatorOptions) { o.writesPerHour = -1 }, "--writes-per-hour -1: the rates cannot be negative (0 is unlimited)"},
		{"a negative read budget", func(o *emulatorOptions) { o.readsPerHour = -5 }, "--reads-per-hour -5"},
		{"a listen address without a port", func(o *emulatorOptions) { o.listen = "not-an-address" }, `--listen "not-an-address": want HOST:PORT, such as 127.0.0.1:8443`},
		{"an Entra ID address without a port", func(o *emulatorOptions) { o.entraListen = "localhost" }, `--entra-listen "localhost": want HOST:PORT`},
		{"a negative operation delay", func(o *emulatorOptions) { o.operationDelay = -time.Second }, "--operation-delay -1s: want a duration of zero or more"},
		{"a negative Windows boot", func(o *emulatorOptions) { o.bootDelayWindows = -time.Second }, "--boot-delay-windows -1s"},
		{"saving continuously", func(o *emulatorOptions) { o.saveEvery = 0 }, "--save-every 0s: want a positive duration, such as 30s"},
	} {
		o := valid()
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}
