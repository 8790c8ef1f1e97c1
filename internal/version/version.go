// Package version reports which winkube this is. Release builds set Version
// with -ldflags "-X github.com/winkube/winkube/internal/version.Version=vX.Y.Z";
// other builds fall back to what the Go toolchain recorded.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is overridden at link time for releases.
var Version = ""

// Info is what `winkube version` prints.
type Info struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the version of this binary.
func Get() Info {
	v := Version
	if v == "" {
		v = "v0.0.0-dev"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	return Info{Version: v, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

func (i Info) String() string {
	return fmt.Sprintf("winkube %s (%s, %s)", i.Version, i.GoVersion, i.Platform)
}
