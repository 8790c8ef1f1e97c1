package arm_test

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// apiClient is a client other than go.mod's SDK, by the api-version it
// sends for each operation ("METHOD template", the template as template()
// reduces it).
type apiClient struct {
	name     string
	versions map[string]string
	// all, when set, is the one version sent for every operation.
	all string
}

func (c *apiClient) version(method, path string) string {
	if c.all != "" {
		return c.all
	}
	return c.versions[method+" "+template(path)]
}

// afterToday is a date-shaped api-version later than today (2026-11-28),
// and so than every version any client sends now: a client released after
// the emulator.
const afterToday = "2027-06-01"

// loadClients reads testdata/clients: each file lists the operations one
// published SDK package calls, with their api-versions, read from its
// published files (hack/clientversions/js.mjs for the JavaScript packages,
// emulator/arm/internal/sdkops/clientversions for Go modules that go.mod
// does not hold); its first line names the package, version and files.
// Files that start alike ("js-", "go-") are one client: the newest release
// of that language's SDK.
func loadClients(t *testing.T) []*apiClient {
	t.Helper()
	files, err := filepath.Glob("testdata/clients/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no client api-versions in testdata/clients: %v", err)
	}
	byLang := map[string]*apiClient{}
	var out []*apiClient
	for _, f := range files {
		lang := strings.SplitN(filepath.Base(f), "-", 2)[0]
		cl := byLang[lang]
		if cl == nil {
			cl = &apiClient{versions: map[string]string{}}
			byLang[lang] = cl
			out = append(out, cl)
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		first := true
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") {
				if first {
					name, _, _ := strings.Cut(strings.TrimPrefix(line, "# "), ":")
					if cl.name != "" {
						cl.name += ", "
					}
					cl.name += name
				}
				first = false
				continue
			}
			first = false
			fields := strings.Fields(line)
			if len(fields) != 3 {
				t.Fatalf("%s: %q is not METHOD path api-version", f, line)
			}
			cl.versions[fields[0]+" "+template(fields[1])] = fields[2]
		}
		_ = fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return append(out, &apiClient{name: "every operation at api-version " + afterToday, all: afterToday})
}

func oldestStable(t *testing.T, versions []string) time.Time {
	t.Helper()
	var stable []string
	for _, v := range versions {
		if !strings.Contains(v, "-preview") {
			stable = append(stable, v)
		}
	}
	slices.Sort(stable)
	d, err := time.Parse(time.DateOnly, stable[0])
	if err != nil {
		t.Fatal(err)
	}
	return d
}
