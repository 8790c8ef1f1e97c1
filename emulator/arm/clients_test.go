package arm_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/winkube/winkube/emulator/arm"
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

// A client newer than the emulator is served, and told so twice: in the
// answer's header and, once per provider and version, in the emulator's
// log, where whoever runs it sees that it guessed.
func TestANewerAPIVersionIsServedAndLogged(t *testing.T) {
	var logged bytes.Buffer
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	w := newWorld(t, nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.srv.CACertPEM())
	c := &conformance{t: t, base: w.srv.URL(), tried: map[string]int{},
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}
	for range 2 {
		a := c.do(http.MethodPut, "/subscriptions/"+sub+"/resourcegroups/rg", afterToday, map[string]any{"location": location}, nil)
		if a.status != http.StatusCreated && a.status != http.StatusOK {
			t.Fatalf("a resource group at api-version %s: %d %s", afterToday, a.status, a.raw)
		}
		if got := a.header.Get(arm.ServedAPIVersionHeader); got != "2025-04-01" {
			t.Errorf("%s: %q, want the newest Microsoft.Resources version the emulator knows, 2025-04-01", arm.ServedAPIVersionHeader, got)
		}
	}
	if n := strings.Count(logged.String(), "api-version "+afterToday); n != 1 {
		t.Errorf("the log names %s %d times, want once:\n%s", afterToday, n, logged.String())
	}
}
