package localworld_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/testenv"
)

// The versions a world runs are the ones hack/tools builds: the pin in
// bin/, and the previous minor (one kubeadm upgrade step below) in
// bin/<version>/.
func TestKubernetesVersionsAreHackToolsPins(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s.io/kubernetes (v\S+)`)
	for dir, want := range map[string]string{"hack/tools": localworld.KubernetesVersion, "hack/tools/v1.35": localworld.PreviousKubernetesVersion, "hack/e2e": localworld.KubernetesVersion} {
		b, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if m := pin.FindSubmatch(b); m == nil || string(m[1]) != want {
			t.Errorf("%s/go.mod pins k8s.io/kubernetes %q, the local world says %s", dir, m, want)
		}
	}
	cur, _ := images.ParseVersion(localworld.KubernetesVersion)
	prev, _ := images.ParseVersion(localworld.PreviousKubernetesVersion)
	if prev.Minor != cur.Minor-1 {
		t.Errorf("the previous version %s is not one minor below %s", prev, cur)
	}
	if got := localworld.BinFor("/b", localworld.PreviousKubernetesVersion); got != "/b/"+localworld.PreviousKubernetesVersion {
		t.Errorf("the previous minor's binaries are looked for in %s", got)
	}
}

// A version without binaries is refused with the two a world runs.
func TestOtherKubernetesVersionsRefused(t *testing.T) {
	for _, v := range []string{"v1.34.6", "v1.36.0", "v1.37.0", "1.36.3"} {
		err := localworld.CheckKubernetesVersion(v)
		if err == nil || !strings.Contains(err.Error(), localworld.KubernetesVersion) || !strings.Contains(err.Error(), localworld.PreviousKubernetesVersion) {
			t.Errorf("--kubernetes-version %s: %v, want a refusal naming %v", v, err, localworld.KubernetesVersions())
		}
	}
	for _, v := range localworld.KubernetesVersions() {
		if err := localworld.CheckKubernetesVersion(v); err != nil {
			t.Errorf("--kubernetes-version %s: %v", v, err)
		}
	}
}
