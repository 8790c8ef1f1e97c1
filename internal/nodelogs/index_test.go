package nodelogs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The index names every item with its command, bytes and transport, a
// failure with the shell's own words, and output that reached the
// transport's limit as possibly cut.
func TestIndexListsEveryItemAndWhyOneFailed(t *testing.T) {
	plan := []Item{{"boot.log", "cat /boot.log"}, {"big.log", "cat /big.log"}, {"kern.log", "journalctl -k"}}
	node := fakeNode{"cat /boot.log": "booted\n", "cat /big.log": strings.Repeat("x", 4096)}
	dir := filepath.Join(t.TempDir(), "logs")
	sink, err := NewSink(dir)
	if err != nil {
		t.Fatal(err)
	}
	via := Transport{Name: "Run Command", Limit: 4096}
	start := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	res, err := Collect(node, via, plan, time.Time{}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	idx := NewIndex(Machine{Name: "win-1", Object: "AzureMachine/win-1", OS: "Windows"}, via, res, start, start.Add(time.Minute), time.Time{})
	idx.WhyRunCommand = "SSH: no route"
	if err := idx.Write(sink); err != nil || sink.Close() != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	var got Index
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if got.Machine.Object != "AzureMachine/win-1" || got.Transport != "Run Command" || got.WhyRunCommand != "SSH: no route" ||
		got.Collected != 2 || got.Failed != 1 || len(got.Items) != 3 || !got.Started.Equal(start) || got.Since != nil {
		t.Fatalf("index:\n%s", b)
	}
	boot, big, kern := got.Items[0], got.Items[1], got.Items[2]
	if boot.File != "boot.log" || boot.Command != "cat /boot.log" || boot.Bytes != 7 || boot.Transport != "Run Command" || boot.Error != "" || boot.Truncated {
		t.Errorf("boot.log: %+v", boot)
	}
	if !big.Truncated || big.Bytes != 4096 {
		t.Errorf("output at the transport's limit is marked cut: %+v", big)
	}
	if kern.Error != "status 127: cannot run journalctl -k" || kern.ErrorFile != "kern.log.error" {
		t.Errorf("kern.log: %+v", kern)
	}
	if _, err := os.Stat(filepath.Join(dir, kern.ErrorFile)); err != nil {
		t.Errorf("the error file the index names: %v", err)
	}
}

// Both plans carry every item of CAPZ's collector (cluster-api-provider-azure
// @69ec3a40, test/e2e/azure_logcollector.go) but the crash-dump archive,
// and kube-proxy's log.
func TestPlansCoverCAPZsCollector(t *testing.T) {
	capz := map[bool][]string{
		true: {"reboots.log", "scm.log", "pagefile.log", "cloudbase-init-unattend.log", "cloudbase-init.log", "services.log",
			"hyperv-operation.log", "containerd-containers.log", "containerd-tasks.log", "containers-hcs.log", "kubelet.log", "cni.log", "containerd.log",
			"network.log", "hns-networks.json", "network-individual-detailed.log", "hnsendpoints.log", "hnsendpolicy-detailed.log",
			"ipconfig.log", "ips.log", "interfaces.log", "hnsdiag.txt", "dir-localdumps.log", "kube-proxy.log"},
		false: {"journal.log", "kern.log", "kubelet-version.txt", "kubelet.log", "containerd.log", "ignition.log", "cloud-init.log",
			"cloud-init-output.log", "sentinel-file-dir.txt", "cni.log", "kube-apiserver.log", "kube-proxy.log"},
	}
	for windows, want := range capz {
		files := map[string]bool{}
		for i, it := range Plan(windows) {
			if files[it.File] || it.Command == "" {
				t.Errorf("windows=%t: item %d %q is repeated or has no command", windows, i, it.File)
			}
			files[it.File] = true
		}
		for _, f := range want {
			if !files[f] {
				t.Errorf("windows=%t: %s is missing", windows, f)
			}
		}
		if first := Plan(windows)[0].File; first != "cloudbase-init.log" && first != "cloud-init-output.log" {
			t.Errorf("windows=%t: the boot agent's log comes first, not %s", windows, first)
		}
	}
}
