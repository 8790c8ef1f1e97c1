package cli

import (
	"testing"
	"time"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
)

// emulatorWithEntra starts an ARM emulator, whose machines run on runtime
// (nil: none), and its Entra ID with a service principal holding
// Contributor on every subscription; env is what DefaultAzureCredential
// reads to act as it.
func emulatorWithEntra(t *testing.T, runtime arm.MachineRuntime) (emu *arm.Server, login *entra.Server, env map[string]string) {
	t.Helper()
	dir, err := entra.New(entra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	emu, err = arm.New(arm.Options{Directory: dir, PollInterval: 10 * time.Millisecond, Runtime: runtime})
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	cert, err := emu.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if login, err = entra.Serve(dir, "127.0.0.1:0", cert); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = login.Close() })
	sp, secret, err := dir.CreateServicePrincipal("00000000-0000-4000-8000-00000000c11e", "manager")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.AssignRole(sp.ObjectID, "Contributor", "/"); err != nil {
		t.Fatal(err)
	}
	// The flavors' machines get system-assigned identities, whose roles
	// the manager assigns.
	if err := dir.AssignRole(sp.ObjectID, "User Access Administrator", "/"); err != nil {
		t.Fatal(err)
	}
	return emu, login, map[string]string{"AZURE_TENANT_ID": sp.TenantID, "AZURE_CLIENT_ID": sp.ClientID, "AZURE_CLIENT_SECRET": secret}
}
