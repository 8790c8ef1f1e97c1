package localworld

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/winkube/winkube/emulator/registry"
)

// The Kubernetes versions a local world runs: hack/tools' pin, whose
// binaries are in bin/, and the previous minor's (hack/tools/v1.35), in
// bin/<version>/, from which a world rehearses an upgrade to the pin.
// kubeadm upgrades one minor at a time, so one older minor is what an
// upgrade needs.
const (
	KubernetesVersion         = "v1.36.3"
	PreviousKubernetesVersion = "v1.35.4"
)

// KubernetesVersions lists the versions a local world runs, oldest first.
func KubernetesVersions() []string {
	return []string{PreviousKubernetesVersion, KubernetesVersion}
}

// CheckKubernetesVersion refuses a version the local world has no
// control-plane binaries of.
func CheckKubernetesVersion(v string) error {
	for _, ok := range KubernetesVersions() {
		if v == ok {
			return nil
		}
	}
	return fmt.Errorf("--kubernetes-version %q: the local world runs %s (the previous minor, to rehearse an upgrade) or %s, the versions hack/tools builds",
		v, PreviousKubernetesVersion, KubernetesVersion)
}

// BinFor is where the control-plane binaries of version v are: bin itself
// for hack/tools' pin, bin/<v>/ for the previous minor.
func BinFor(bin, v string) string {
	if v == KubernetesVersion {
		return bin
	}
	return filepath.Join(bin, v)
}

// versionBins are the further control-plane binaries the world's machines
// may run, by version: a world started at the previous minor runs it until
// its control plane is upgraded, and a world at the pin has no machine of
// an older minor to make (kubeadm does not downgrade).
func versionBins(bin, v string) (map[string]string, error) {
	if v == KubernetesVersion {
		return nil, nil
	}
	dir := BinFor(bin, v)
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubeadm"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return nil, fmt.Errorf("Kubernetes %s: %s is missing from %s (run `make tools-previous`, which builds the previous minor from hack/tools/v1.35)", v, b, dir)
		}
	}
	return map[string]string{v: dir}, nil
}

// catalog is what the world's registry publishes: the images of the
// world's version and of the newer one it may be upgraded to, each listed
// by that version's own kubeadm, as the public registries hold both.
func (w *World) catalog(ctx context.Context) ([]registry.Image, error) {
	o := w.opts
	var out []registry.Image
	seen := map[string]bool{}
	upgrade := false
	for _, v := range KubernetesVersions() {
		upgrade = upgrade || v == o.KubernetesVersion
		if !upgrade {
			continue
		}
		list, err := exec.CommandContext(ctx, filepath.Join(BinFor(o.Bin, v), "kubeadm"), "config", "images", "list", "--kubernetes-version", v).Output()
		if err != nil {
			return nil, fmt.Errorf("kubeadm config images list --kubernetes-version %s: %w", v, err)
		}
		for _, img := range Catalog(v, strings.Fields(string(list))) {
			if !seen[img.Ref] {
				seen[img.Ref] = true
				out = append(out, img)
			}
		}
	}
	return out, nil
}
