package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/winkube/winkube/emulator/machines/bootdata"
)

// A boot that fails part-way returns its error; it once stopped a nil
// control plane on the way out and took the whole runtime down with it.
func TestFailedBootReturnsItsError(t *testing.T) {
	dir := t.TempDir()
	// The machine's root is a file: nothing can be written under it.
	if err := os.WriteFile(filepath.Join(dir, "root"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := Start(context.Background(), Config{Dir: dir, Boot: &bootdata.BootData{Role: bootdata.Init,
		Files: []bootdata.File{{Path: "/etc/kubernetes/pki/ca.crt", Content: []byte("x")}}}})
	if err == nil || cp != nil {
		t.Fatalf("Start with an unwritable disk: %v, %v", cp, err)
	}
}

// A machine runs the components and kubeadm of its ClusterConfiguration's
// version when the runtime has them, as a VM runs what its image carries;
// etcd, one minor for both versions, and any version without binaries of
// its own run Bin's.
func TestMachineRunsItsVersionsBinaries(t *testing.T) {
	cfg := Config{Bin: "/bin", Versions: map[string]string{"v1.35.4": "/bin/v1.35.4"}}
	for _, c := range []struct{ version, name, want string }{
		{"v1.35.4", "kube-apiserver", "/bin/v1.35.4/kube-apiserver"},
		{"v1.35.4", "kubeadm", "/bin/v1.35.4/kubeadm"},
		{"v1.35.4", "etcd", "/bin/etcd"},
		{"v1.36.3", "kube-apiserver", "/bin/kube-apiserver"},
	} {
		cp := &ControlPlane{cfg: cfg, cluster: &bootdata.ClusterConfiguration{KubernetesVersion: c.version}}
		if got := cp.binary(c.name); got != c.want {
			t.Errorf("a %s machine runs %s from %s, want %s", c.version, c.name, got, c.want)
		}
	}
}
