package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"github.com/winkube/winkube/internal/azure/endpoint"
)

// startEmulator runs `winkube emulator` and returns the endpoint it prints
// and a function that stops it (as Ctrl-C would) and returns its output.
func startEmulator(t *testing.T, args ...string) (endpoint.Config, func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	cmd := NewRootCommand()
	cmd.SetArgs(append([]string{"emulator", "--listen", "127.0.0.1:0", "--operation-delay", "0", "--boot-delay-linux", "0", "--boot-delay-windows", "0"}, args...))
	cmd.SetOut(pw)
	errc := make(chan error, 1)
	go func() { errc <- cmd.ExecuteContext(ctx); pw.Close() }()
	var cfg endpoint.Config
	var out strings.Builder
	var tenant, clientID, secret string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		out.WriteString(line + "\n")
		if v, ok := strings.CutPrefix(line, "AZURE_RESOURCE_MANAGER_ENDPOINT="); ok {
			cfg.ResourceManagerEndpoint = v
		}
		if v, ok := strings.CutPrefix(line, "AZURE_AUTHORITY_HOST="); ok {
			cfg.AuthorityHost = v
		}
		if v, ok := strings.CutPrefix(line, "AZURE_CA_FILE="); ok {
			pem, err := os.ReadFile(v)
			if err != nil {
				t.Fatal(err)
			}
			cfg.CACertPEM = pem
		}
		if v, ok := strings.CutPrefix(line, "AZURE_TENANT_ID="); ok {
			tenant = v
		}
		if v, ok := strings.CutPrefix(line, "AZURE_CLIENT_ID="); ok {
			clientID = v
		}
		if v, ok := strings.CutPrefix(line, "AZURE_CLIENT_SECRET="); ok {
			secret = v
			break
		}
	}
	if secret != "" {
		// The printed service principal, through Entra ID as a user's
		// program would authenticate.
		shared, err := cfg.Shared()
		if err != nil {
			t.Fatal(err)
		}
		cred, err := azidentity.NewClientSecretCredential(tenant, clientID, secret, &azidentity.ClientSecretCredentialOptions{
			ClientOptions:            azcore.ClientOptions{Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: cfg.AuthorityHost}, Transport: shared.Transport},
			DisableInstanceDiscovery: true})
		if err != nil {
			t.Fatal(err)
		}
		cfg = shared
		cfg.Credential = cred
	}
	if cfg.Credential == nil {
		cancel()
		t.Fatalf("winkube emulator did not print how to reach it:\n%s\n%v", out.String(), <-errc)
	}
	// The rest of the output is copied until the command ends and closes
	// its end of the pipe.
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, pr); close(copied) }()
	return cfg, func() string {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("winkube emulator: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("winkube emulator did not stop")
		}
		<-copied
		return out.String()
	}
}

func TestEmulatorCommandKeepsStateAcrossRestarts(t *testing.T) {
	state := filepath.Join(t.TempDir(), "arm.json")
	cfg, stop := startEmulator(t, "--state", state)
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	groups, err := armresources.NewResourceGroupsClient("sub", cfg.Credential, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groups.CreateOrUpdate(context.Background(), "kept", armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatal(err)
	}
	if out := stop(); !strings.Contains(out, "saved resources to "+state) {
		t.Fatalf("no word of saving:\n%s", out)
	}

	cfg, stop = startEmulator(t, "--state", state)
	defer stop()
	opts, _ = cfg.ClientOptions()
	groups, _ = armresources.NewResourceGroupsClient("sub", cfg.Credential, opts)
	if _, err := groups.Get(context.Background(), "kept", nil); err != nil {
		t.Fatalf("the resource group did not survive a restart: %v", err)
	}
}

func TestEmulatorCommandRefusesBadFlags(t *testing.T) {
	if _, err := run(t, "emulator", "--writes-per-hour", "-1"); err == nil || !strings.Contains(err.Error(), "cannot be negative") {
		t.Fatalf("negative budget: %v", err)
	}
	var u *UsageError
	if _, err := run(t, "emulator", "--listen", "not-an-address"); !errors.As(err, &u) || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("a bad listen address: %v, want bad input naming --listen", err)
	}
	// A zero period made the save ticker panic once the emulator served.
	if _, err := run(t, "emulator", "--listen", "127.0.0.1:0", "--entra-listen", "127.0.0.1:0", "--save-every", "0"); !errors.As(err, &u) || !strings.Contains(err.Error(), "--save-every 0s") {
		t.Fatalf("--save-every 0: %v, want bad input naming --save-every", err)
	}
}
