package nodelogs

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSinceKeepsLinesFromThenOn(t *testing.T) {
	now := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	since := now.Add(-30 * time.Minute)
	in := strings.Join([]string{
		"header without a time",
		"2026-11-22T22:00:00Z old",
		"  continuation of old",
		"2026-11-22T22:40:00.123Z new",
		"  continuation of new",
		"2026-11-22 22:10:00.000 cloudbase-init old",
		"2026-11-22 22:45:00.000 cloudbase-init new",
		"Nov 22 22:20:00.000001 host kubelet[1]: old",
		"Nov 22 22:50:00.000001 host kubelet[1]: new",
		"I1122 22:29:59.999999    1 kubelet.go:1] old",
		"I1122 22:31:00.000000    1 kubelet.go:1] new",
	}, "\n")
	got := string(Since([]byte(in), since, now))
	if strings.Contains(got, "old") || strings.Count(got, "new") != 5 || !strings.HasPrefix(got, "header") {
		t.Fatalf("Since:\n%s", got)
	}
}

type fakeNode map[string]string

func (f fakeNode) Run(cmd string, stdout, stderr io.Writer) error {
	out, ok := f[cmd]
	if !ok {
		_, _ = io.WriteString(stderr, "cannot run "+cmd)
		return errors.New("status 127")
	}
	_, err := io.WriteString(stdout, out)
	return err
}

func TestCollectIntoFolderAndArchive(t *testing.T) {
	plan := Plan(true)
	node := fakeNode{plan[0].Command: "booted\n", `Get-Content 'C:\var\log\kubelet\kubelet.log'`: "kubelet ran\n"}
	dir := filepath.Join(t.TempDir(), "logs")
	sink, err := NewSink(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Collect(node, Transport{Name: "SSH"}, plan, time.Time{}, sink, nil)
	if err != nil || sink.Close() != nil || len(res) != len(plan) {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "kubelet.log")); string(b) != "kubelet ran\n" {
		t.Errorf("kubelet.log %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "kubelet.err.log.error")); !strings.Contains(string(b), "cannot run") {
		t.Errorf("a failed command keeps its error output: %q", b)
	}
	if _, err := NewSink(dir); err == nil {
		t.Error("a folder that has files must not be written into")
	}

	archive := filepath.Join(t.TempDir(), "node.tar.gz")
	sink, err = NewSink(archive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Collect(node, Transport{Name: "SSH"}, plan[:2], time.Time{}, sink, nil); err != nil || sink.Close() != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(archive)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "node/cloudbase-init.log,node/cloudbase-init-unattend.log,node/cloudbase-init-unattend.log.error" {
		t.Errorf("archive holds %v", names)
	}
	if _, err := NewSink(archive); err == nil {
		t.Error("an existing archive must not be overwritten")
	}
}
