package nodejoin_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/client-go/tools/clientcmd"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/machines/sshd"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/machines/vmshell"
	"github.com/winkube/winkube/internal/nodeaccess"
	"github.com/winkube/winkube/internal/nodejoin"
	"github.com/winkube/winkube/internal/nodessh"
)

// Over a machine's SSH the script goes as one -EncodedCommand; when it
// stops on the machine, the join fails naming the step and the script's
// own failure, and the diagnosis shows the last lines of the machine's
// transcript and kubelet log, read over the same SSH. The machine is an
// emulated Windows Server 2022 one that cannot reach the API server: its
// shell runs the script's steps, and the preflight step stops it.
func TestJoinOverSSHDiagnosesAFailedScript(t *testing.T) {
	kubeconfig := nodejoin.KubeadmClusterForCLI(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	disk := vmdisk.Disk{Root: dir, Windows: true, User: "capi"}
	write := func(p, text string) {
		host, err := disk.HostPath(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(nodejoin.TranscriptPath, "winkube-step: preflight\nwinkube-step: containerd\nwinkube: FAILED: downloading containerd failed\n")
	write(`C:\var\log\kubelet\kubelet.err.log`, "E1128 run.go:72] \"command failed\" err=\"failed to parse kubelet flag: unknown flag: --pod-infra-container-image\"\n")
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.Start(sshd.Config{Address: "127.0.0.1:0", HostKeyFile: filepath.Join(dir, "hostkey"),
		AuthorizedKeys: map[string][]ssh.PublicKey{"capi": {key.PublicKey()}},
		Shell:          &vmshell.Machine{Hostname: "byo-win-1", Disk: disk, Build: "20348"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	target := &nodeaccess.Target{Hostname: "byo-win-1", Address: "127.0.0.1", OS: infrav1.Windows, Direct: true, JumpHosts: []string{srv.Addr()}}
	conn, err := nodessh.Dial(context.Background(), target, nodessh.Options{User: "capi", Signers: []ssh.Signer{key},
		KnownHosts: &nodessh.KnownHosts{Path: filepath.Join(t.TempDir(), "known_hosts")}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	var out bytes.Buffer
	res, err := nodejoin.Run(context.Background(), cfg, nodejoin.Options{Node: "byo-win-1", WindowsVersion: infrav1.WindowsServer2022, Wait: time.Minute}, conn, &out)
	if err == nil || !strings.Contains(err.Error(), "the join script failed on byo-win-1 in step preflight") ||
		!strings.Contains(err.Error(), "does not answer on TCP") {
		t.Fatalf("join on a machine that cannot reach the API server: %v\n%s", err, out.String())
	}
	// The session's stdout and stderr both reach out, whole.
	if !strings.Contains(out.String(), "winkube-step: preflight\nwinkube: FAILED: the API server") {
		t.Errorf("the script's output over SSH is not whole (%v):\n%s", err, out.String())
	}
	for _, want := range []string{"last 20 lines of " + nodejoin.TranscriptPath, "FAILED: downloading containerd failed", "unknown flag: --pod-infra-container-image"} {
		if !strings.Contains(res.Diagnosis, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, res.Diagnosis)
		}
	}
}
