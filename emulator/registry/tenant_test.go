package registry_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/registry"
)

// TestPushSocketIsNeverReachableByOthers: the push socket is bound inside
// a directory only its owner can enter, never in the state directory
// itself (here one others may enter, mode 0755), so there is no instant in
// which another user can connect to it; it appears at its path already
// 0600, the private directory is gone, and Close removes the socket.
func TestPushSocketIsNeverReachableByOthers(t *testing.T) {
	state := t.TempDir()
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(state, registry.PushSocket)
	var bound []string
	var boundIn []fs.FileMode
	defer registry.OnListenUnix(func(p string) {
		bound = append(bound, p)
		fi, err := os.Stat(filepath.Dir(p))
		if err != nil {
			t.Errorf("the directory the socket is bound in: %v", err)
			return
		}
		boundIn = append(boundIn, fi.Mode().Perm())
	})()
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.ServePush(sock); err != nil {
		t.Fatal(err)
	}
	if len(bound) != 1 || filepath.Dir(bound[0]) == state || boundIn[0] != 0o700 {
		t.Fatalf("the push socket was bound at %v in directories of mode %v, want one bind inside a 0700 directory of its own, not in the state directory %s", bound, boundIn, state)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("push socket %s: %v %v, want a socket with 0600", sock, fi, err)
	}
	entries, _ := os.ReadDir(state)
	if len(entries) != 1 {
		t.Errorf("the state directory holds %v, want only the socket", entries)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the push socket outlived Close: %v", err)
	}
}

// TestGzipBombIsRefused: a gzipped OCI archive that expands far beyond its
// size (a blob of zeros, as a decompression bomb is) is refused with an
// error saying so while unpacking into TMPDIR, nothing of it is left
// there, and an ordinary gzipped archive still loads.
func TestGzipBombIsRefused(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	// Small bounds keep the test's bomb small: the rule, not the numbers.
	defer registry.SetUnpackLimit(20, 1<<20)()
	dir := t.TempDir()

	good := filepath.Join(dir, "good")
	writeLayout(t, good, "example.com/team/app:1", windowsApp(t, registry.Build2019), windowsApp(t, registry.Build2022))
	goodTar := filepath.Join(dir, "good.tar")
	tarDir(t, good, goodTar)
	goodGz := gzipFile(t, goodTar)
	imgs, cleanup, err := registry.ReadImages(goodGz, "")
	cleanup()
	if err != nil || len(imgs) != 1 {
		t.Fatalf("an ordinary gzipped OCI archive: %v %v", imgs, err)
	}

	// The same layout with a 16 MiB blob of zeros beside its blobs:
	// about 16 kB gzipped.
	zeros := make([]byte, 16<<20)
	sum := sha256.Sum256(zeros)
	if err := os.WriteFile(filepath.Join(good, "blobs", "sha256", hex.EncodeToString(sum[:])), zeros, 0o644); err != nil {
		t.Fatal(err)
	}
	bombTar := filepath.Join(dir, "bomb.tar")
	tarDir(t, good, bombTar)
	bomb := gzipFile(t, bombTar)
	imgs, cleanup, err = registry.ReadImages(bomb, "")
	cleanup()
	if err == nil || !strings.Contains(err.Error(), "gzip bomb") || !strings.Contains(err.Error(), "gunzip -c") {
		t.Fatalf("a gzip bomb: read %v, err %v; want a refusal saying it expands too far and what to do", imgs, err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("TMPDIR holds %v after the refusal", left)
	}
}

func gzipFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	out := p + ".gz"
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
