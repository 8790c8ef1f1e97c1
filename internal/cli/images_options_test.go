package cli

import "testing"

// TestImagesOptionsValidate: what no image matches, and a flag that would
// be ignored, are refused before a catalog is read, as bad input.
func TestImagesOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name    string
		resolve bool
		change  func(*imagesOptions)
		want    string // "" for valid
	}{
		{"list, defaults", false, func(*imagesOptions) {}, ""},
		{"list, a remote catalog", false, func(o *imagesOptions) { o.armEndpoint, o.armCAFile = "https://127.0.0.1:8443", "ca.pem" }, ""},
		{"list, Windows in upper case", false, func(o *imagesOptions) { o.os = "Windows" }, ""},
		{"list, an unknown OS", false, func(o *imagesOptions) { o.os = "macos" }, `--os "macos": use windows or linux`},
		{"list, a CA without an endpoint", false, func(o *imagesOptions) { o.armCAFile = "ca.pem" }, "--arm-ca-file ca.pem is the CA of --arm-endpoint's certificate"},
		{"list, JSON", false, func(o *imagesOptions) { o.output = "json" }, ""},
		{"list, XML", false, func(o *imagesOptions) { o.output = "xml" }, "table, json or yaml"},
		{"resolve", true, func(o *imagesOptions) { o.kubernetesVersion = "v1.31.1" }, ""},
		{"resolve, dockershim", true, func(o *imagesOptions) { o.kubernetesVersion, o.runtime = "v1.22.1", "dockershim" }, ""},
		{"resolve, no version", true, func(*imagesOptions) {}, "--kubernetes-version is required"},
		{"resolve, an unknown runtime", true, func(o *imagesOptions) { o.kubernetesVersion, o.runtime = "v1.31.1", "podman" }, `--runtime "podman": use containerd or dockershim`},
		{"resolve, an unknown source", true, func(o *imagesOptions) { o.kubernetesVersion, o.source = "v1.31.1", "shared" }, "use marketplace or gallery"},
	} {
		o := imagesOptions{output: "table", location: "westeurope"}
		c.change(&o)
		if c.resolve {
			r := imagesResolveOptions{o}
			wantBadInput(t, c.name, r.Validate(), c.want)
			continue
		}
		l := imagesListOptions{o}
		wantBadInput(t, c.name, l.Validate(), c.want)
	}
}
