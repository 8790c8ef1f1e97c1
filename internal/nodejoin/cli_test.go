package nodejoin_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/winkube/winkube/internal/cli"
	"github.com/winkube/winkube/internal/nodejoin"
)

// The commands as a user types them: join prints the script for a
// kubeconfig's cluster, leave removes the node's token again; a name too
// long for Windows is refused by the preflight, with nothing created.
func TestNodeJoinAndLeaveCommands(t *testing.T) {
	kubeconfig := nodejoin.KubeadmClusterForCLI(t)
	run := func(args ...string) (int, string, string) {
		var out, errw bytes.Buffer
		code := cli.Execute(context.Background(), "winkube", args, &out, &errw)
		return code, out.String(), errw.String()
	}
	code, out, errw := run("node", "join", "byo-win-1", "--kubeconfig", kubeconfig, "--windows-version", "2025", "--print-script")
	if code != 0 || !strings.Contains(out, "kubeadm.exe join") || !strings.Contains(out, "pause:3.10.2") {
		t.Fatalf("node join --print-script: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errw)
	}
	if !strings.Contains(errw, "created bootstrap token") || !strings.Contains(errw, "Calico lists only Windows Server 2019 and 2022") {
		t.Errorf("node join did not report its token and the 2025 Calico warning:\n%s", errw)
	}
	code, _, errw = run("node", "join", "byo-windows-0001", "--kubeconfig", kubeconfig, "--print-script")
	if code != 1 || !strings.Contains(errw, "16 characters") || strings.Contains(errw, "created bootstrap token") {
		t.Errorf("node join of a 16-character name: exit %d\n%s", code, errw)
	}
	code, _, errw = run("node", "leave", "byo-win-1", "--kubeconfig", kubeconfig)
	if code != 0 || !strings.Contains(errw, "deleted bootstrap token") {
		t.Errorf("node leave: exit %d\n%s", code, errw)
	}
}
