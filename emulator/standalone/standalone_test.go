package standalone

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func options(state string) Options {
	return Options{Listen: "127.0.0.1:0", EntraListen: "127.0.0.1:0", Tenant: "72f988bf-0000-4000-8000-00000000e1d0", State: state}
}

// TestRestartKeepsTheBootstrapPrincipal: the service principal made at
// the first start is found again in the directory saved beside the state,
// with its secret, so a restart prints the same credentials; the CA is
// written beside the state.
func TestRestartKeepsTheBootstrapPrincipal(t *testing.T) {
	state := filepath.Join(t.TempDir(), "arm.json")
	e, err := Start(options(state))
	if err != nil {
		t.Fatal(err)
	}
	if e.Bootstrap == nil || e.BootstrapSecret == "" || e.Loaded {
		t.Fatalf("first start: bootstrap %v, secret %q, loaded %v", e.Bootstrap, e.BootstrapSecret, e.Loaded)
	}
	first, secret := e.Bootstrap.ClientID, e.BootstrapSecret
	if e.CAFile != filepath.Join(filepath.Dir(state), "emulator-ca.pem") {
		t.Errorf("CA file %s, want it beside the state", e.CAFile)
	}
	if err := e.Save(); err != nil {
		t.Fatal(err)
	}
	e.Close()

	e, err = Start(options(state))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !e.Loaded || e.Bootstrap == nil || e.Bootstrap.ClientID != first || e.BootstrapSecret != secret {
		t.Fatalf("after a restart: loaded %v, bootstrap %+v, want client %s with the same secret", e.Loaded, e.Bootstrap, first)
	}
}

// TestStartRefusesWhatItCannotUse: an operator the directory lacks and a
// directory file that cannot be read are told apart, so the command can
// name its flag.
func TestStartRefusesWhatItCannotUse(t *testing.T) {
	o := options("")
	o.Operators = []string{"00000000-0000-4000-8000-000000000bad"}
	var unknown *UnknownOperatorError
	if _, err := Start(o); !errors.As(err, &unknown) || unknown.ClientID != o.Operators[0] {
		t.Errorf("an unknown operator: %v", err)
	}
	o = options("")
	o.DirectoryFile = filepath.Join(t.TempDir(), "missing.json")
	if _, err := Start(o); !errors.Is(err, ErrDirectoryFile) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing directory file: %v", err)
	}
}
