package localworld

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/poll"
)

// The Entra ID is on disk as soon as it changes: a managed identity and a
// role assignment made while the world runs (as ARM makes them for a VM)
// are in entra.json, which only its owner may read, although the world
// never stopped cleanly; the next start loads them.
func TestDirectorySavedAsItChanges(t *testing.T) {
	dir := t.TempDir()
	w := &World{opts: Options{StateDir: dir, Log: logr.Discard()}}
	if err := w.startDirectory(); err != nil {
		t.Fatal(err)
	}
	// Nothing stops it: as after a SIGKILL, only what is on disk counts.
	// The saver is stopped at the end only so that the test leaves no
	// goroutine writing into a removed directory.
	t.Cleanup(func() { w.dirSaver.close() })
	mi := entra.Principal{Kind: entra.ManagedIdentity, TenantID: Tenant, ClientID: entra.NewGUID(), ObjectID: entra.NewGUID(), DisplayName: "cp-0"}
	if err := w.dir.AddPrincipal(mi); err != nil {
		t.Fatal(err)
	}
	scope := "/subscriptions/" + Subscription + "/resourceGroups/c"
	if _, _, err := w.dir.CreateRoleAssignment(entra.RoleAssignment{Name: entra.NewGUID(), PrincipalID: mi.ObjectID, Role: "Contributor", Scope: scope}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, entraState)
	poll.Until(t, 10*time.Second, func() string {
		next, err := entra.New(entra.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := next.LoadFile(path); err != nil {
			return "loading " + path + ": " + err.Error()
		}
		if _, ok := next.PrincipalByObjectID(mi.ObjectID); !ok {
			return "the managed identity is not in " + path
		}
		for _, a := range next.RoleAssignments() {
			if a.PrincipalID == mi.ObjectID && a.Scope == scope {
				return ""
			}
		}
		return "the role assignment is not in " + path
	})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s is %v: it holds client secrets and the signing key, and must be its owner's only", path, fi.Mode().Perm())
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".entra-*"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}
