package internal_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The data flows one way: the emulator knows Azure, not winkube, so nothing
// under emulator/ imports winkube's own packages; and the provider runs on
// real Azure without the simulation, so internal/ reaches emulator/ only
// where it wires the local world (the CLI's up, emulator and images
// commands, the local world and what its bring-up leaves, and the Azure
// services' test helper). The packages both import (windowslimits, dotted,
// kubeletflags, namedwatch, localports) import neither.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/winkube/winkube/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/winkube/winkube/"
	wiresTheLocalWorld := map[string]bool{
		mod + "internal/cli":             true,
		mod + "internal/localworld":      true,
		mod + "internal/azure/azuretest": true,
		// Where a world's machines keep their logs (their disks).
		mod + "internal/localworld/bringup": true,
	}
	// Facts both sides read (the Windows pod limits, the order of versions)
	// and the mechanisms both use (a watch per object name).
	sharedByBoth := map[string]bool{
		mod + "windowslimits": true,
		mod + "dotted":        true,
		mod + "kubeletflags":  true,
		mod + "namedwatch":    true,
		// The local world's rule for privileged ports: the emulator's
		// servers and the CLI's SSH client follow it.
		mod + "localports": true,
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, imports := f[0], f[1:]
		checked++
		for _, imp := range imports {
			switch {
			case strings.HasPrefix(pkg, mod+"emulator") && strings.HasPrefix(imp, mod+"internal/"):
				t.Errorf("%s imports %s: the emulator must not know winkube's internals", pkg, imp)
			case strings.HasPrefix(pkg, mod+"internal/") && strings.HasPrefix(imp, mod+"emulator") && !wiresTheLocalWorld[pkg]:
				t.Errorf("%s imports %s: production code must not depend on the simulation", pkg, imp)
			case sharedByBoth[pkg] && (strings.HasPrefix(imp, mod+"internal/") || strings.HasPrefix(imp, mod+"emulator")):
				t.Errorf("%s imports %s: emulator/ and internal/ both import it, so it knows neither", pkg, imp)
			case pkg == mod+"internal/doctor" && imp == mod+"internal/controllers":
				t.Errorf("%s imports %s: the condition types and reasons it reads are in api/v1alpha1", pkg, imp)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d packages listed", checked)
	}
	// The controllers, and the command the manager image is built from
	// (make image), as they run in a management cluster: none of the
	// emulators or the machine runtime may ship in it.
	for _, pkg := range []string{mod + "internal/controllers", mod + "cmd/winkube-manager"} {
		deps, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, dep := range strings.Fields(string(deps)) {
			if strings.HasPrefix(dep, mod+"emulator") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
