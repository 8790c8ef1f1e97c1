package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestGenerateCluster(t *testing.T) {
	if _, err := run(t, "generate", "cluster", "--kubernetes-version", "v1.36.3"); err == nil ||
		!strings.Contains(err.Error(), "NAME") || !strings.Contains(err.Error(), "--location") || !strings.Contains(err.Error(), "--ssh-public-key") {
		t.Fatalf("missing values: %v", err)
	}
	key := filepath.Join(t.TempDir(), "id.pub")
	if err := os.WriteFile(key, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flannel := []string{"generate", "cluster", "demo", "--flavor", "windows-flannel", "--kubernetes-version", "v1.36.3", "--location", "westeurope",
		"--subscription-id", "00000000-0000-0000-0000-000000000001", "--ssh-public-key", key, "--windows-version", "2025"}
	// No flannel image for Windows is published: the user names theirs.
	if _, err := run(t, flannel...); err == nil || !strings.Contains(err.Error(), "--flannel-windows-image and --kube-proxy-windows-image") {
		t.Fatalf("flannel without the user's images: %v", err)
	}
	out, err := run(t, append(flannel, "--flannel-windows-image", "registry.example.com/flannel:w", "--kube-proxy-windows-image", "registry.example.com/kube-proxy:w")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: MachineDeployment", "name: demo-md-win", "windowsServerVersion: \"2025\"", `"VNI": 4096`, "ip link set dev eth0 mtu 1400", "image: registry.example.com/flannel:w"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s", want)
		}
	}
	// Refused on the last version that still had dockershim too: Docker
	// cannot run the flavor's HostProcess add-ons.
	for _, version := range []string{"v1.30.0", "v1.23.17"} {
		if _, err := run(t, "generate", "cluster", "demo", "--flavor", "windows-dockershim", "--kubernetes-version", version, "--location", "westeurope",
			"--subscription-id", "s", "--ssh-public-key", key); err == nil || !strings.Contains(err.Error(), "Docker does not support HostProcess containers") ||
			!strings.Contains(err.Error(), "--flavor windows (containerd)") {
			t.Fatalf("dockershim on %s: %v", version, err)
		}
	}
	if _, err := run(t, "generate", "cluster", "demo", "--windows-version", "2016", "--kubernetes-version", "v1.36.3", "--location", "westeurope",
		"--subscription-id", "s", "--ssh-public-key", key); err == nil || !strings.Contains(err.Error(), "2019, 2022 or 2025") {
		t.Fatalf("windows 2016: %v", err)
	}
	tmpl, err := run(t, "generate", "cluster", "--clusterctl-template", "--flavor", "machinepool-windows")
	if err != nil || !strings.Contains(tmpl, "Variables: ") || !strings.Contains(tmpl, "${WINDOWS_WORKER_MACHINE_COUNT}") {
		t.Fatalf("clusterctl template: %v", err)
	}
}

// generateDemo is generate cluster demo with every required value, of the
// default flavor.
func generateDemo(t *testing.T) []string {
	t.Helper()
	key := filepath.Join(t.TempDir(), "id.pub")
	if err := os.WriteFile(key, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"generate", "cluster", "demo", "--kubernetes-version", "v1.36.3", "--location", "westeurope",
		"--subscription-id", "00000000-0000-0000-0000-000000000001", "--ssh-public-key", key}
}

// TestGenerateAzureDiskCSI: --azuredisk-csi labels the Cluster as CAPZ's
// HelmChartProxy selects and adds the add-on's ClusterResourceSet; without
// it neither is there.
func TestGenerateAzureDiskCSI(t *testing.T) {
	args := generateDemo(t)
	without, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	with, err := run(t, append(args, "--azuredisk-csi")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`azuredisk-csi: "true"`, "name: demo-azuredisk-csi", "name: csi-azuredisk-node-win", "provisioner: disk.csi.azure.com"} {
		if !strings.Contains(with, want) {
			t.Errorf("with --azuredisk-csi the output lacks %s", want)
		}
		if strings.Contains(without, want) {
			t.Errorf("without --azuredisk-csi the output has %s", want)
		}
	}
}

// TestGenerateCalicoTyphaReplicas: --calico-typha-replicas sizes the
// calico-typha Deployment; without it the manifest's 1 stays.
func TestGenerateCalicoTyphaReplicas(t *testing.T) {
	args := generateDemo(t)
	typha := regexp.MustCompile(`kind: Deployment\s+metadata:\s+labels:\s+k8s-app: calico-typha\s+name: calico-typha\s+namespace: kube-system\s+spec:\s+replicas: (\d+)`)
	for _, c := range []struct {
		flags []string
		want  string
	}{{nil, "1"}, {[]string{"--calico-typha-replicas", "3"}, "3"}} {
		out, err := run(t, append(args, c.flags...)...)
		if err != nil {
			t.Fatal(err)
		}
		if m := typha.FindStringSubmatch(out); m == nil || m[1] != c.want {
			t.Errorf("%v: calico-typha replicas %v, want %s", c.flags, m, c.want)
		}
	}
}
