package cli

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// `winkube emulator --help` names the client releases whose api-versions
// the emulator's tests send (emulator/arm/testdata/clients), so that a
// refresh of those files that forgets the help fails here, and says how to
// report an operation the emulator lacks.
func TestEmulatorHelpNamesTheClientsTried(t *testing.T) {
	out, err := run(t, "emulator", "--help")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../emulator/arm/testdata/clients/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no client files: %v", err)
	}
	release := regexp.MustCompile(`^# (\S+?)(?:@| )v?(\d+\.\d+\.\d+)`)
	help := strings.Join(strings.Fields(out), " ")
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Scan()
		_ = fh.Close()
		m := release.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("%s: first line %q names no release", f, sc.Text())
		}
		if !strings.Contains(help, m[2]) {
			t.Errorf("the help does not name %s %s, whose api-versions the tests send", m[1], m[2])
		}
	}
	for _, want := range []string{"Clients tried", "report it", "X-Winkube-Served-Api-Version", "/metadata/endpoints", "az cloud register"} {
		if !strings.Contains(help, want) {
			t.Errorf("the help does not say %q:\n%s", want, out)
		}
	}
}
