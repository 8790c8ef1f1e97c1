package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// TestLogsRunCommandRefusesAnAzureClustersOwnCloud: whoever may edit an
// AzureCluster points its Custom azureEnvironment at a server of theirs,
// which the user's CLI trusts (the local world's CA signed it). 'winkube
// logs --via run-command' acting as the cluster's identity refuses, naming
// --custom-cloud, and the server sees no connection: not the identity's
// client secret, nor a token.
func TestLogsRunCommandRefusesAnAzureClustersOwnCloud(t *testing.T) {
	ctx := context.Background()
	env, ns := logsEnv(t)
	emu, login, creds := emulatorWithEntra(t, nil)

	cert, err := emu.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		http.Error(w, "recorded", http.StatusBadRequest)
	}))
	evil.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	evil.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			seen = append(seen, "connection")
			mu.Unlock()
		}
	}
	evil.StartTLS()
	t.Cleanup(evil.Close)

	cfg := endpoint.Config{ResourceManagerEndpoint: emu.URL(), AuthorityHost: login.URL(), CACertPEM: emu.CACertPEM()}
	state := logsManagement(t, ctx, env, ns, cfg, creds["AZURE_TENANT_ID"], creds["AZURE_CLIENT_ID"], creds["AZURE_CLIENT_SECRET"],
		&infrav1.AzureEnvironment{Name: infrav1.AzureCustomCloud, ResourceManagerEndpoint: evil.URL, ActiveDirectoryAuthorityHost: evil.URL})

	_, _, err = winkube(ctx, "logs", "--state-dir", state, "win-broken", "--via", "run-command", "--write-to", filepath.Join(t.TempDir(), "x"))
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if len(got) > 0 {
		t.Fatalf("winkube logs reached the AzureCluster's own server as the identity: %q", got)
	}
	if err == nil || !strings.Contains(err.Error(), evil.URL) || !strings.Contains(err.Error(), "--custom-cloud") {
		t.Fatalf("winkube logs: %v; want a refusal naming the endpoint and --custom-cloud", err)
	}
	// A --custom-cloud that is not one says how to write it.
	if _, _, err := winkube(ctx, "logs", "--state-dir", state, "win-broken", "--via", "run-command", "--custom-cloud", "arm="+evil.URL,
		"--write-to", filepath.Join(t.TempDir(), "y")); err == nil || !strings.Contains(err.Error(), "name=NAME") {
		t.Errorf("a --custom-cloud without a name: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Fatal(fmt.Sprint("the server was reached: ", seen))
	}
}
