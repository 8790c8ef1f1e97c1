package vmdisk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPathsStayOnTheDisk(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "Program Files", "Cloudbase Solutions"), 0o755); err != nil {
		t.Fatal(err)
	}
	win := Disk{Root: root, Windows: true, User: "capi"}
	lin := Disk{Root: root, User: "capi"}
	cases := []struct {
		d    Disk
		in   string
		want string
	}{
		{win, `C:\var\log\kubelet\kubelet.log`, "var/log/kubelet/kubelet.log"},
		{win, `c:/var/log`, "var/log"},
		{win, `C:\program files\cloudbase solutions\x.log`, "Program Files/Cloudbase Solutions/x.log"},
		{win, `notes.txt`, "Users/capi/notes.txt"},
		{win, `C:\..\..\etc\passwd`, "etc/passwd"},
		{lin, "/var/log/auth.log", "var/log/auth.log"},
		{lin, "~/x", "home/capi/x"},
		{lin, "../../../../etc/shadow", "etc/shadow"},
	}
	for _, c := range cases {
		got, err := c.d.HostPath(c.in)
		if err != nil || got != filepath.Join(root, c.want) {
			t.Errorf("HostPath(%q) = %q, %v; want %q", c.in, got, err, filepath.Join(root, c.want))
		}
	}
	if _, err := win.HostPath(`D:\data`); err == nil || !strings.Contains(err.Error(), "only C:") {
		t.Errorf("drive D: %v", err)
	}
}

func TestLogsGoWhereCollectorsLook(t *testing.T) {
	root := t.TempDir()
	at := time.Date(2026, 11, 22, 22, 0, 0, 0, time.UTC)
	l := NewLogs(Disk{Root: root, Windows: true})
	l.now = func() time.Time { return at }
	l.Write(Kubelet, "registered %s", "win-abcde")
	l.Write(Boot, "line one\n")
	b, err := os.ReadFile(filepath.Join(root, "var/log/kubelet/kubelet.log"))
	if err != nil || string(b) != "2026-11-22T22:00:00Z registered win-abcde\n" {
		t.Fatalf("kubelet log: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(root, "Program Files/Cloudbase Solutions/Cloudbase-Init/log/cloudbase-init.log")); err != nil {
		t.Fatal(err)
	}
	var nilLogs *Logs
	nilLogs.Write(Kubelet, "dropped") // a machine without logs keeps none
	if got := LogPath(false, Kubelet); got != "/var/log/journal/kubelet.service.log" {
		t.Errorf("Linux kubelet log %s", got)
	}
}
