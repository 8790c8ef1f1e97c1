package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/localworld"
)

// TestImageLoad: `winkube image load` finds the world by its state
// directory, pushes a docker save tarball through the world's push socket
// and says what it loaded; a file that is no image and a directory with no
// world are refused, naming what is wrong.
func TestImageLoad(t *testing.T) {
	state := t.TempDir()
	// What a running world leaves in its state directory for the CLI.
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if err := reg.ServePush(filepath.Join(state, registry.PushSocket)); err != nil {
		t.Fatal(err)
	}
	for f, content := range map[string]string{localworld.RegistryFile: reg.Host() + "\n", localworld.ManagementKubeconfig: "apiVersion: v1\nkind: Config\n"} {
		if err := os.WriteFile(filepath.Join(state, f), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.OSVersion = "windows", "amd64", registry.Build2022
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(t.TempDir(), "app.tar")
	tag, _ := name.NewTag("registry.example.com/team/app:1.0")
	if err := tarball.WriteToFile(saved, tag, img); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := execWinkube(t, "winkube", "image", "load", "--state-dir", state, saved)
	digest, _ := img.Digest()
	if code != 0 || !strings.Contains(out, "loaded registry.example.com/team/app:1.0@"+digest.String()) || !strings.Contains(out, "windows/amd64 "+registry.Build2022) ||
		!strings.Contains(errOut, "pushing registry.example.com/team/app:1.0") {
		t.Fatalf("image load: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	m, err := reg.Lookup(t.Context(), "registry.example.com/team/app:1.0")
	if err != nil || m.Digest != digest.String() {
		t.Fatalf("the registry has %+v (%v), want %s", m, err, digest)
	}

	notImage := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notImage, []byte(strings.Repeat("just words\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--state-dir", state, notImage}, 1, "is not a tar archive"},
		{[]string{"--state-dir", state, filepath.Join(state, "missing.tar")}, 2, "image path"},
		{[]string{"--state-dir", t.TempDir(), saved}, 2, "no local world in"},
		{[]string{"--state-dir", state, "--ref", "x.example.com/a:1", saved, saved}, 2, "--ref names one image"},
		// Refused before the world is looked for.
		{[]string{"--state-dir", t.TempDir(), "--ref", "Example.com/App:1", saved}, 2, `--ref "Example.com/App:1" is not an image reference`},
	} {
		code, _, errOut := execWinkube(t, "winkube", append([]string{"image", "load"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("image load %v: exit %d %q, want %d with %q", c.args, code, errOut, c.code, c.want)
		}
	}
}
