package vmshell

import (
	"bytes"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

func run(m *Machine, line string) (string, string, int) {
	var out, errb bytes.Buffer
	status := m.Run(line, &out, &errb)
	return out.String(), errb.String(), status
}

func windowsMachine(t *testing.T) *Machine {
	root := t.TempDir()
	l := vmdisk.NewLogs(vmdisk.Disk{Root: root, Windows: true})
	for i := range 5 {
		l.Write(vmdisk.Kubelet, "line %d", i)
	}
	return &Machine{Hostname: "win-abcde", Disk: vmdisk.Disk{Root: root, Windows: true, User: "capi"},
		KubeletVersion: func() string { return "v1.36.3" },
		HNS: func() ([]kubelet.HNSNetwork, []kubelet.HNSEndpoint) {
			return []kubelet.HNSNetwork{{Name: "Calico", Type: "Overlay", AddressPrefix: "192.168.3.0/24", ManagementIP: "10.1.0.5"}},
				[]kubelet.HNSEndpoint{{Name: "ep-1", IPAddress: netip.MustParseAddr("192.168.3.2").String(), VirtualNetwork: "Calico", State: "Attached"}}
		}}
}

func TestWindowsCommands(t *testing.T) {
	m := windowsMachine(t)
	if out, _, s := run(m, "hostname"); s != 0 || out != "win-abcde\n" {
		t.Errorf("hostname: %q %d", out, s)
	}
	out, _, s := run(m, `Get-Content -Path 'C:\VAR\log\kubelet\kubelet.log' -Tail 2`)
	if s != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "line 4") || strings.Contains(out, "line 2") {
		t.Errorf("Get-Content -Tail 2: %q %d", out, s)
	}
	if _, errOut, s := run(m, `type C:\missing.log`); s == 0 || !strings.Contains(errOut, "Cannot find path") {
		t.Errorf("a missing file: %q %d", errOut, s)
	}
	out, _, s = run(m, "Get-HnsNetwork | ConvertTo-Json -Depth 20")
	var nets []kubelet.HNSNetwork
	if s != 0 || json.Unmarshal([]byte(out), &nets) != nil || len(nets) != 1 || nets[0].AddressPrefix != "192.168.3.0/24" {
		t.Errorf("Get-HnsNetwork | ConvertTo-Json: %q %d", out, s)
	}
	if out, _, _ := run(m, "get-hnsendpoint"); !strings.Contains(out, "192.168.3.2") {
		t.Errorf("Get-HnsEndpoint: %q", out)
	}
	if out, _, s := run(m, "kubelet.exe --version"); s != 0 || out != "Kubernetes v1.36.3\n" {
		t.Errorf("kubelet --version: %q", out)
	}
	// What the machine cannot do is refused, never faked.
	for _, line := range []string{"net user capi Passw0rd!", "Get-HnsNetwork | Remove-HnsNetwork", "hostname; whoami", "Get-Content x > y"} {
		if _, errOut, s := run(m, line); s != exitNotFound || !strings.Contains(errOut, "cannot run") {
			t.Errorf("%q: status %d, %q", line, s, errOut)
		}
	}
}

func TestLinuxCommands(t *testing.T) {
	root := t.TempDir()
	d := vmdisk.Disk{Root: root, User: "capi"}
	vmdisk.NewLogs(d).Write(vmdisk.Kubelet, "Successfully registered node n1")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := &Machine{Hostname: "n1", Disk: d}
	out, _, s := run(m, "sudo journalctl --no-pager --output=short-precise -u kubelet.service")
	if s != 0 || !strings.Contains(out, "registered node n1") {
		t.Errorf("journalctl -u kubelet: %q %d", out, s)
	}
	if out, _, _ := run(m, "journalctl -u containerd"); out != "-- No entries --\n" {
		t.Errorf("an empty unit: %q", out)
	}
	if out, _, s := run(m, "ls /"); s != 0 || !strings.Contains(out, " etc") {
		t.Errorf("ls /: %q", out)
	}
	if out, errOut, s := run(m, "ls /etc /nope"); s != exitFailed || !strings.Contains(errOut, "cannot access '/nope'") || out != "" {
		t.Errorf("ls of an empty and a missing folder: %q %q %d", out, errOut, s)
	}
	if _, errOut, s := run(m, "kubelet --version"); s == 0 || !strings.Contains(errOut, "not been started") {
		t.Errorf("kubelet before it runs: %q", errOut)
	}
	if _, errOut, s := run(m, "rm -rf /"); s != exitNotFound || !strings.Contains(errOut, "emulated Linux machine") {
		t.Errorf("rm: %q %d", errOut, s)
	}
}

func TestInteractiveShell(t *testing.T) {
	m := windowsMachine(t)
	var out bytes.Buffer
	rw := struct {
		io.Reader
		io.Writer
	}{strings.NewReader("hostname\rexit\r"), &out}
	if s := m.Interactive(rw); s != 0 {
		t.Errorf("status %d", s)
	}
	if !strings.Contains(out.String(), "PS C:\\Users\\capi> ") || !strings.Contains(out.String(), "win-abcde") {
		t.Errorf("session:\n%q", out.String())
	}
}
