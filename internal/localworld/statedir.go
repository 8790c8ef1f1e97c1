package localworld

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/winkube/winkube/emulator/registry"
)

// WorldFile marks a directory as a local world's state directory. A
// --state-dir is a path a user types: a typo or a '~' must never make
// 'winkube down' delete a directory that winkube did not make, so only a
// directory with this file (or, from before it existed, one holding only
// the world's own entries) counts as a world, and of it only the entries
// worldEntry names are removed.
const WorldFile = "winkube-world.json"

// worldManifest is WorldFile's content.
type worldManifest struct {
	// Kind says what the file is to someone who finds it.
	Kind string `json:"kind"`
	// Names are the worlds started on the directory: each has its
	// workload kubeconfig, NAME.kubeconfig.
	Names []string `json:"names"`
}

const worldKind = "winkube local world state directory"

// lockFile is the world's lock: the process holding its flock runs the
// world. pidFile only tells a person which process that is; nothing is
// decided by it, since a pid outlives a crashed winkube and is reused.
const (
	lockFile = "lock"
	pidFile  = "pid"
)

// worldEntry says whether a top-level entry of a state directory is one a
// local world makes (Start, the CLI around it, node access). Directories
// among them hold only what winkube writes into them. A file or directory
// added to the state directory must be named here, or 'winkube down' keeps
// it and says so.
func worldEntry(name string, m worldManifest) bool {
	switch name {
	case WorldFile, lockFile, pidFile,
		"winkube.log", "known_hosts", RegistryFile, registry.PushSocket, BlockFile, ARMEndpointFile, ManagementKubeconfig,
		SSHKeyFile, SSHKeyFile + ".pub", emulatorState, hostnetState, hostnetState + ".tmp", entraState,
		"manifests", "launchers", "management-etcd", etcdPKIDir, "machines", "admission":
		return true
	}
	// The registry binds its push socket in a private directory before
	// renaming it into place; a kill in between leaves the directory.
	if strings.HasPrefix(name, registry.PushSocketTempPrefix) {
		return true
	}
	// emulator/arm's and emulator/entra's Save write by rename from a
	// temporary file that a kill may leave behind.
	if strings.HasPrefix(name, ".emulator-state-") || strings.HasPrefix(name, ".entra-") {
		return true
	}
	if n, ok := strings.CutSuffix(name, ".kubeconfig"); ok {
		return slices.Contains(m.Names, n)
	}
	return false
}

// legacyMarkers are entries every world made before WorldFile existed:
// a directory holding them and nothing else is taken for such a world.
var legacyMarkers = []string{lockFile, "management-etcd"}

// readManifest reads dir's WorldFile; ok is false when there is none.
func readManifest(dir string) (m worldManifest, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, WorldFile))
	if errors.Is(err, os.ErrNotExist) {
		return worldManifest{}, false, nil
	}
	if err != nil {
		return worldManifest{}, false, err
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Kind != worldKind {
		return worldManifest{}, false, fmt.Errorf("%s is not a winkube world's manifest: delete the directory yourself if it is no longer needed", filepath.Join(dir, WorldFile))
	}
	return m, true, nil
}

// world reads what dir holds: whether it is a world (by its manifest, or
// for a world from before manifests, by holding only world entries among
// them the legacy markers), its manifest, and the entries that are not
// the world's.
func world(dir string) (m worldManifest, isWorld bool, foreign []string, err error) {
	m, marked, err := readManifest(dir)
	if err != nil {
		return m, false, nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return m, false, nil, err
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
		// A world from before manifests named its workload kubeconfig
		// after the world, which it did not record.
		if n, ok := strings.CutSuffix(e.Name(), ".kubeconfig"); ok && !marked && n != strings.TrimSuffix(ManagementKubeconfig, ".kubeconfig") {
			m.Names = append(m.Names, n)
		}
	}
	for _, e := range entries {
		if !worldEntry(e.Name(), m) {
			foreign = append(foreign, e.Name())
		}
	}
	sort.Strings(foreign)
	if marked {
		return m, true, foreign, nil
	}
	legacy := len(foreign) == 0
	for _, n := range legacyMarkers {
		legacy = legacy && names[n]
	}
	if legacy {
		return m, true, nil, nil
	}
	// Not a world: kubeconfigs, which it cannot have named, are someone
	// else's too.
	foreign = foreign[:0]
	for _, e := range entries {
		if !worldEntry(e.Name(), worldManifest{}) {
			foreign = append(foreign, e.Name())
		}
	}
	sort.Strings(foreign)
	return worldManifest{}, false, foreign, nil
}

// ClaimStateDir makes dir a world's state directory for the world name:
// a new or empty directory (or one holding only entries a world makes,
// such as a test's loopback-block), or one that already is a world's. A directory
// holding anything else is refused, so that no world's files are mixed
// into a user's folder (and 'winkube down' later has nothing of the
// user's to leave behind).
func ClaimStateDir(dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := checkPrivate(dir); err != nil {
		return err
	}
	m, isWorld, foreign, err := world(dir)
	if err != nil {
		return err
	}
	if !isWorld && len(foreign) > 0 {
		return fmt.Errorf("state directory %s is not a winkube world's and is not empty (it holds %s): name a new or empty directory with --state-dir", dir, listEntries(foreign))
	}
	if _, marked, _ := readManifest(dir); marked && slices.Contains(m.Names, name) {
		return nil
	}
	m.Kind = worldKind
	if !slices.Contains(m.Names, name) {
		m.Names = append(m.Names, name)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, WorldFile), append(b, '\n'), 0o600)
}

// ErrNotWorld says a directory holds no local world.
var ErrNotWorld = errors.New("not a winkube world's state directory")

// CheckWorld returns nil when dir is a local world's state directory, and
// otherwise an error wrapping ErrNotWorld (or os.ErrNotExist) that says
// why, without changing anything in dir.
func CheckWorld(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	_, isWorld, foreign, err := world(dir)
	if err != nil {
		return err
	}
	if !isWorld {
		if len(foreign) == 0 {
			return fmt.Errorf("%s is empty or holds no world's manifest (%s): %w", dir, WorldFile, ErrNotWorld)
		}
		return fmt.Errorf("%s has no %s and holds %s: %w", dir, WorldFile, listEntries(foreign), ErrNotWorld)
	}
	return nil
}

// RemoveWorld deletes a stopped world's files from dir: only the entries
// a world makes, and dir itself once nothing else is left in it. kept
// lists the entries it left, which are not the world's. It refuses a
// directory that is not a world's and one a running winkube holds.
func RemoveWorld(dir string) (kept []string, err error) {
	if err := CheckWorld(dir); err != nil {
		return nil, err
	}
	lock, err := lockState(dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	m, _, foreign, err := world(dir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	// The manifest and the lock go last: a removal that fails half way
	// leaves a directory that is still a world's, which down removes
	// again.
	for _, e := range entries {
		switch n := e.Name(); {
		case n == WorldFile || n == lockFile || !worldEntry(n, m):
		default:
			// RemoveAll removes a symbolic link, not what it points to.
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return foreign, err
			}
		}
	}
	for _, n := range []string{WorldFile, lockFile} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return foreign, err
		}
	}
	if len(foreign) == 0 {
		if err := os.Remove(dir); err != nil {
			return nil, err
		}
	}
	return foreign, nil
}

func listEntries(names []string) string {
	const most = 5
	if len(names) > most {
		return strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
	}
	return strings.Join(names, ", ")
}

// Holder is the pid of the process that holds dir's lock (a running
// winkube up or down), or 0 when none does. held is true whenever the
// lock is taken, even where the holder cannot be told (then pid is 0).
func Holder(dir string) (pid int, held bool, err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	if err := tryLock(f); err == nil {
		unlock(f)
		return 0, false, nil
	}
	pid, err = lockHolder(f)
	return pid, true, err
}

// SignalHolder sends sig to the process that holds dir's lock, and to no
// other: the signal goes through a pidfd opened on the holder and only
// after the lock is seen held by that same pid again, so a pid reused
// between the two looks cannot receive it. It returns the pid signalled,
// or 0 when no process holds the lock.
func SignalHolder(dir string, sig syscall.Signal) (int, error) {
	return signalHolder(dir, sig)
}
