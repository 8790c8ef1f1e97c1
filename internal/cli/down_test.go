package cli

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// fakeBin is a --bin that passes down's look for the binaries and whose
// etcd cannot start: a down that goes as far as starting the world stops
// there, in a second, with nothing booted.
func fakeBin(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "kube-apiserver"), []byte("#!/bin/sh\nexit 1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return bin
}

// tree is every entry under dir with its mode and content, to compare.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %s", rel, info.Mode())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// worldFiles are what a stopped world leaves in its state directory (a
// sample of each kind: files, folders, the workload kubeconfig), with the
// manifest a world writes.
var worldFiles = map[string]string{
	"winkube-world.json":                `{"kind": "winkube local world state directory", "names": ["demo"]}`,
	"lock":                              "",
	"winkube.log":                       "log\n",
	"emulator.json":                     "{}",
	"hostnet.json":                      "{}",
	"management.kubeconfig":             "apiVersion: v1\n",
	"demo.kubeconfig":                   "apiVersion: v1\n",
	"id_ed25519":                        "key\n",
	"management-etcd/member/snap/db":    "etcd",
	"machines/demo-cp-1/disk/etc/hosts": "127.0.0.1 localhost\n",
	"manifests/crd/x.yaml":              "kind: CustomResourceDefinition\n",
}

// TestDownRefusesADirectoryThatIsNotAWorld is finding 5's attack by
// mistake: 'winkube down --state-dir ~' (or a typo naming any folder of
// the user's). down refuses it and nothing in it changes: no file deleted,
// none written; up refuses to make its state there.
func TestDownRefusesADirectoryThatIsNotAWorld(t *testing.T) {
	bin := fakeBin(t)
	home := t.TempDir()
	writeFiles(t, home, map[string]string{
		".bashrc":                 "export PATH=$PATH:~/bin\n",
		"Documents/thesis.tex":    "\\documentclass{book}\n",
		".ssh/id_ed25519":         "private\n",
		".kube/config":            "apiVersion: v1\n",
		"work.kubeconfig":         "apiVersion: v1\n",
		".winkube/known_hosts":    "127.2.0.4 ssh-ed25519 AAAA\n",
		"projects/winkube/go.mod": "module x\n",
	})
	before := tree(t, home)
	for _, args := range [][]string{
		{"down", "--bin", bin, "--state-dir", home},
		{"up", "--bin", bin, "--state-dir", home},
	} {
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "not a winkube world") {
			t.Errorf("winkube %s: %v, want a refusal saying the directory is not a winkube world's", strings.Join(args, " "), err)
		}
		if after := tree(t, home); after != before {
			t.Fatalf("winkube %s changed the directory:\nbefore:\n%s\nafter:\n%s", strings.Join(args, " "), before, after)
		}
	}
	// A directory holding only kubeconfigs is no world either.
	kube := t.TempDir()
	writeFiles(t, kube, map[string]string{"prod.kubeconfig": "apiVersion: v1\n", "management.kubeconfig": "apiVersion: v1\n"})
	before = tree(t, kube)
	if _, err := run(t, "down", "--bin", bin, "--state-dir", kube); err == nil || !strings.Contains(err.Error(), "not a winkube world") {
		t.Errorf("down on a folder of kubeconfigs: %v", err)
	}
	if after := tree(t, kube); after != before {
		t.Fatalf("down changed a folder of kubeconfigs:\n%s", after)
	}
}

// fakeUp holds dir's lock as a running 'winkube up' does, and on SIGUSR1
// (down's request) lets go of it as up does when it has deleted its
// cluster and stopped.
func fakeUp(t *testing.T, dir string) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(fmt.Sprint(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	asked := make(chan os.Signal, 1)
	signal.Notify(asked, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-asked
		_ = os.Remove(filepath.Join(dir, "pid"))
		_ = lock.Close()
	}()
	t.Cleanup(func() {
		signal.Stop(asked)
		select {
		case asked <- syscall.SIGUSR1:
		default: // already asked
		}
		<-done
	})
}

// TestDownKeepsFilesItDidNotMake: a user's file in a world's state
// directory survives down, which removes every file of the world's and
// says what it kept.
func TestDownKeepsFilesItDidNotMake(t *testing.T) {
	bin := fakeBin(t)
	state := filepath.Join(t.TempDir(), "demo")
	writeFiles(t, state, worldFiles)
	writeFiles(t, state, map[string]string{"notes.txt": "my notes\n", "backup/cluster.yaml": "kind: Cluster\n"})
	fakeUp(t, state)
	out, err := run(t, "down", "demo", "--bin", bin, "--state-dir", state)
	if err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	left, err := os.ReadDir(state)
	if err != nil {
		t.Fatalf("down removed the directory holding the user's files: %v", err)
	}
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != "backup,notes.txt" {
		t.Errorf("left in the state directory: %s, want only the user's backup,notes.txt", got)
	}
	for _, f := range []string{"notes.txt", "backup/cluster.yaml"} {
		if _, err := os.Stat(filepath.Join(state, f)); err != nil {
			t.Errorf("the user's %s: %v", f, err)
		}
	}
	if !strings.Contains(out, "backup, notes.txt") {
		t.Errorf("down did not say what it kept:\n%s", out)
	}

	// Without anything of the user's, the directory itself goes.
	clean := filepath.Join(t.TempDir(), "demo")
	writeFiles(t, clean, worldFiles)
	fakeUp(t, clean)
	if out, err := run(t, "down", "demo", "--bin", bin, "--state-dir", clean); err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	if _, err := os.Stat(clean); !os.IsNotExist(err) {
		t.Errorf("a world's own state directory after down: %v, want it gone", err)
	}
}

// TestDownNeverSignalsARecordedPid: after a crash, the pid an up recorded
// belongs to an unrelated process. down decides by the lock, which no one
// holds, and never signals that process.
func TestDownNeverSignalsARecordedPid(t *testing.T) {
	bin := fakeBin(t)
	state := filepath.Join(t.TempDir(), "demo")
	writeFiles(t, state, worldFiles)
	victim := exec.Command("sleep", "600")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = victim.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = victim.Process.Kill()
		<-exited
	})
	writeFiles(t, state, map[string]string{"pid": fmt.Sprint(victim.Process.Pid)})
	// With no up running, down starts the world itself to delete the
	// cluster: the fake binaries make that fail at once.
	_, err := run(t, "down", "demo", "--bin", bin, "--state-dir", state)
	if err == nil {
		t.Fatal("down with binaries that cannot start succeeded")
	}
	select {
	case <-exited:
		t.Fatalf("down signalled pid %d, an unrelated process whose pid was recorded in the state: %v", victim.Process.Pid, victim.ProcessState)
	default:
	}
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the unrelated process: %v", err)
	}
	// The world's files are still there for a down that can start it.
	if _, err := os.Stat(filepath.Join(state, "management-etcd", "member", "snap", "db")); err != nil {
		t.Errorf("a down that failed removed the world's data: %v", err)
	}
}
