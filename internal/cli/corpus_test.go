package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exec runs winkube as a user would and returns its exit code and what it
// printed on stderr.
func execWinkube(t *testing.T, arg0 string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), arg0, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestBadInvocations is a corpus of mistakes a user makes: each exits 2
// (bad input) before anything is written or started, with a message that
// names the flag or argument to change and points to --help.
func TestBadInvocations(t *testing.T) {
	dir := t.TempDir()
	pub := filepath.Join(dir, "id.pub")
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(pub, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh me\n")
	priv := filepath.Join(dir, "id")
	write(priv, "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n")
	garbage := filepath.Join(dir, "garbage.pub")
	write(garbage, "ssh-ed25519 not-base64!!\n")
	exists := filepath.Join(dir, "exists.yaml")
	write(exists, "keep me\n")
	sub := "00000000-0000-0000-0000-000000000001"
	// A --bin without the binaries, and a stopped world's state directory.
	emptyBin := t.TempDir()
	worldDir := t.TempDir()
	writeFiles(t, worldDir, worldFiles)
	gen := func(extra ...string) []string {
		base := []string{"generate", "cluster", "demo", "--kubernetes-version", "v1.36.3", "--location", "westeurope", "--subscription-id", sub, "--ssh-public-key", pub}
		return append(base, extra...)
	}
	genNamed := func(name string) []string {
		return []string{"generate", "cluster", name, "--kubernetes-version", "v1.36.3", "--location", "westeurope", "--subscription-id", sub, "--ssh-public-key", pub}
	}
	missingWorld := filepath.Join(dir, "no-world")
	cases := []struct {
		args  []string
		names []string // what the message must name
	}{
		// generate
		{[]string{"generate", "clusters", "x"}, []string{`"clusters"`, "cluster"}},
		{[]string{"generate", "cluster", "demo", "--kubernetes-version", "v1.36.3"}, []string{"--location", "--subscription-id", "--ssh-public-key"}},
		{gen("--location", "West Europe"), []string{"--location", "westeurope"}},
		{gen("--location", "west-europe"), []string{"--location"}},
		{gen("--subscription-id", "my-subscription"), []string{"--subscription-id", "GUID"}},
		{gen("--node-vm-size", "big"), []string{"--node-vm-size"}},
		{gen("--control-plane-vm-size", "D2s_v3"), []string{"--control-plane-vm-size"}},
		{genNamed("Demo"), []string{"NAME", "Demo"}},
		{genNamed("demo_1"), []string{"NAME", "demo_1"}},
		{genNamed(strings.Repeat("a", 64)), []string{"NAME"}},
		{gen("--kubernetes-version", "v1.40.0"), []string{"--kubernetes-version", "v1.36.3"}},
		{gen("--kubernetes-version", "1.36"), []string{"--kubernetes-version", "v1.MINOR.PATCH"}},
		{gen("--kubernetes-version", "v1.17.4"), []string{"--kubernetes-version", "oldest"}},
		{gen("--flavor", "bogus"), []string{"--flavor", "windows-flannel"}},
		{gen("--flavor", "windows-dockershim", "--kubernetes-version", "v1.30.0"), []string{"--flavor", "windows"}},
		{gen("--flavor", "windows-dockershim", "--kubernetes-version", "v1.23.17"), []string{"--flavor windows-dockershim", "HostProcess", "v1.24", "--flavor windows (containerd)"}},
		{gen("--windows-version", "2016"), []string{"--windows-version", "2022"}},
		{gen("--windows-version", "2025", "--kubernetes-version", "v1.30.2"), []string{"--windows-version"}},
		{gen("--control-plane-nodes", "2"), []string{"--control-plane-nodes", "odd"}},
		{gen("--linux-nodes", "-1"), []string{"--linux-nodes"}},
		{gen("--windows-nodes", "-3"), []string{"--windows-nodes"}},
		{gen("--ssh-public-key", filepath.Join(dir, "missing.pub")), []string{"--ssh-public-key"}},
		{gen("--ssh-public-key", priv), []string{"--ssh-public-key", "private"}},
		{gen("--ssh-public-key", garbage), []string{"--ssh-public-key"}},
		{gen("-o", "xml"), []string{"--output", "yaml"}},
		{gen("-o", "out.yaml"), []string{"--output", "--write-to out.yaml"}},
		{gen("--write-to", exists), []string{"--write-to", "exists"}},
		{gen("--regoin", "westeurope"), []string{"--regoin"}},
		{gen("--namespace", "Team_A"), []string{"--namespace", "Team_A"}},
		{[]string{"generate", "cluster", "a", "b", "--kubernetes-version", "v1.36.3"}, []string{"b"}},
		{[]string{"generate", "cluster", "demo", "--clusterctl-template"}, []string{"NAME", "demo"}},
		{[]string{"generate", "cluster", "--clusterctl-template", "--flavor", "nope"}, []string{"--flavor"}},
		{[]string{"generate", "cluster", "--clusterctl-template", "-o", "json"}, []string{"--output"}},
		// up, down, bench: refused before any binary is looked for
		{[]string{"up", "--flavor", "bogus"}, []string{"--flavor"}},
		{[]string{"up", "--flavor", "windows-dockershim"}, []string{"--flavor windows-dockershim", "HostProcess", "--flavor windows (containerd)"}},
		{[]string{"up", "Demo"}, []string{"NAME", "Demo"}},
		{[]string{"up", "--kubernetes-version", "v1.99.0"}, []string{"--kubernetes-version", "v1.36.3"}},
		// a version generate accepts, but no binaries of it are built
		{[]string{"up", "--kubernetes-version", "v1.34.6"}, []string{"--kubernetes-version", "v1.35.4", "v1.36.3"}},
		{[]string{"up", "--windows-version", "2016"}, []string{"--windows-version"}},
		{[]string{"up", "--control-plane-nodes", "0"}, []string{"--control-plane-nodes"}},
		{[]string{"up", "--windows-nodes", "-2"}, []string{"--windows-nodes"}},
		{[]string{"up", "--timeout", "0s"}, []string{"--timeout"}},
		{[]string{"up", "--timeout", "soon"}, []string{"--timeout"}},
		{[]string{"up", "one", "two"}, []string{"two"}},
		{[]string{"down", "--state-dir", missingWorld}, []string{"--state-dir", "nothing to delete"}},
		{[]string{"bench", "--size", "1+1"}, []string{"--size", "1+1"}},
		{[]string{"bench", "--size", "2+0+0"}, []string{"--size", "--control-plane-nodes"}},
		{[]string{"bench", "--size", "1+x+1"}, []string{"--size", `"x"`}},
		{[]string{"bench", "extra"}, []string{`"extra"`}},
		// up and down: refused before the world starts (before, --bootstrap-timeout
		// 0s meant the default, and --bin's lack exited 1)
		{[]string{"up", "--bootstrap-timeout", "0s", "--bin", emptyBin, "--state-dir", missingWorld}, []string{"--bootstrap-timeout"}},
		{[]string{"up", "--bin", emptyBin, "--state-dir", missingWorld}, []string{"--bin " + emptyBin, "were not found"}},
		{[]string{"down", "--bin", emptyBin, "--state-dir", worldDir}, []string{"--bin " + emptyBin, "were not found"}},
		// images: refused before a catalog is read
		{[]string{"images", "list", "--os", "macos"}, []string{"--os"}},
		{[]string{"images", "list", "--arm-ca-file", pub}, []string{"--arm-ca-file", "--arm-endpoint"}},
		{[]string{"images", "resolve", "--os", "windows"}, []string{"--kubernetes-version"}},
		{[]string{"images", "resolve", "--kubernetes-version", "v1.31.1", "--runtime", "podman"}, []string{"--runtime", "containerd"}},
		// rehearse: flags --delete would ignore
		{[]string{"rehearse", "bootstrap-failure", "--delete", "--machine-deployment", "md-0", "--management-kubeconfig", missingWorld}, []string{"--machine-deployment"}},
		{[]string{"rehearse", "bootstrap-failure", "--delete", "--kubeadm-timeout", "1m", "--management-kubeconfig", missingWorld}, []string{"--kubeadm-timeout"}},
		// version
		{[]string{"version", "-o", "xml"}, []string{"--output", "short, json, yaml"}},
		{[]string{"version", "extra"}, []string{`"extra"`}},
		// node access: refused before the management cluster is asked
		{[]string{"ssh"}, []string{"MACHINE|NODE"}},
		// node join
		{[]string{"node", "join"}, []string{"MACHINE|NODE"}},
		{[]string{"node", "join", "byo-win-1", "--windows-version", "2016"}, []string{"--windows-version", "2022"}},
		{[]string{"node", "join", "byo-win-1", "--containerd-version", "v1.7.25"}, []string{"--containerd-version", "1.7.25"}},
		{[]string{"node", "join", "byo-win-1", "--api-server", "10.0.0.4"}, []string{"--api-server", "host:port"}},
		// machine
		{[]string{"machine", "create"}, []string{"NAME"}},
		{[]string{"machine", "create", "byo-windows-0001"}, []string{"NAME", "15"}},
		{[]string{"machine", "create", "byo-win-1", "--windows", "2016"}, []string{"--windows", "2022"}},
		{[]string{"machine", "delete", "a", "b"}, []string{"drop b"}},
		{[]string{"ssh", "node-a", "hostname"}, []string{"--"}},
		{[]string{"ssh", "--state-dir", missingWorld, "node-a", "--", "hostname"}, []string{"--state-dir"}},
		{[]string{"ssh", "--kubeconfig", missingWorld, "-i", filepath.Join(dir, "no-key"), "node-a", "--", "hostname"}, []string{"--identity"}},
		{[]string{"ssh", "--kubeconfig", missingWorld, "--user", "", "node-a", "--", "hostname"}, []string{"--user"}},
		{[]string{"ssh", "--local", "demo", "--state-dir", worldDir, "node-a", "--", "hostname"}, []string{"--local demo", "--state-dir"}},
		{[]string{"rdp"}, []string{"MACHINE|NODE"}},
		{[]string{"rdp", "a", "b"}, []string{"drop b"}},
		{[]string{"rdp", "a", "--local-port", "70000"}, []string{"--local-port"}},
		{[]string{"logs", "node-a", "--since", "-5m"}, []string{"--since"}},
		{[]string{"logs", "node-a", "-o", "x.tar.gz"}, []string{"--write-to x.tar.gz"}},
		{[]string{"logs", "node-a", "--local", "no-such-world-" + filepath.Base(dir)}, []string{"--local"}},
		{[]string{"logs", "node-a", "--kubeconfig", missingWorld, "--custom-cloud", "garbage"}, []string{"--custom-cloud", "name=NAME"}},
		{[]string{"logs", "node-a", "--kubeconfig", missingWorld, "-i", filepath.Join(dir, "no-key")}, []string{"--identity"}},
		{[]string{"doctor", "-o", "yaml"}, []string{"--output", "text, json"}},
		{[]string{"doctor", "--local", "no-such-world-" + filepath.Base(dir)}, []string{"--local"}},
		{[]string{"doctor", "--kubeconfig", missingWorld, "--cert-warning", "-1h"}, []string{"--cert-warning"}},
		{[]string{"doctor", "--local", "demo", "--state-dir", worldDir}, []string{"--local demo", "--state-dir"}},
		{[]string{"plan", "windows-upgrade", "--to", "2022", "--local", "demo", "--state-dir", worldDir}, []string{"--local demo", "--state-dir"}},
		{[]string{"plan", "upgrade", "--to", "v1.36.3", "--local", "demo", "--state-dir", worldDir}, []string{"--local demo", "--state-dir"}},
		// the rest of the tree
		{[]string{"bogus"}, []string{`"bogus"`}},
		{[]string{"gen"}, []string{"generate"}},
		{[]string{"emulator", "--reads-per-hour", "-1"}, []string{"--reads-per-hour"}},
		{[]string{"admission", "--registry-failure-policy", "maybe"}, []string{"--registry-failure-policy"}},
		{[]string{"manager", "--concurrency", "many"}, []string{"--concurrency"}},
	}
	if len(cases) < 40 {
		t.Fatalf("the corpus has %d cases; it is meant to have at least 40", len(cases))
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := execWinkube(t, "winkube", c.args...)
			if code != ExitBadInput {
				t.Fatalf("exit code %d, want %d (bad input); stderr:\n%s", code, ExitBadInput, errOut)
			}
			for _, want := range c.names {
				if !strings.Contains(errOut, want) {
					t.Errorf("the message does not name %q:\n%s", want, errOut)
				}
			}
			if !strings.Contains(errOut, "--help") {
				t.Errorf("the message does not point to --help:\n%s", errOut)
			}
			if out != "" {
				t.Errorf("bad input wrote to standard output: %q", out)
			}
		})
	}
	if b, err := os.ReadFile(exists); err != nil || string(b) != "keep me\n" {
		t.Errorf("--write-to overwrote an existing file: %q, %v", b, err)
	}
	if _, err := os.Stat(missingWorld); !os.IsNotExist(err) {
		t.Errorf("a refused command created %s", missingWorld)
	}
}

// TestExitCodes: success is 0, a failure that is not the user's input is
// 1, and as kubectl's plugin the messages speak of 'kubectl winkube'.
func TestExitCodes(t *testing.T) {
	if code, out, _ := execWinkube(t, "winkube", "version"); code != ExitOK || !strings.HasPrefix(out, "winkube v") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, out, _ := execWinkube(t, "winkube", "generate"); code != ExitOK || !strings.Contains(out, "cluster") {
		t.Fatalf("a command group without a subcommand prints its help and exits 0: %d %q", code, out)
	}
	// A kubeconfig that points at nothing: a failure to reach, not bad input.
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := execWinkube(t, "winkube", "ssh", "--kubeconfig", kc, "node-a", "--", "hostname"); code != ExitFailure || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("an unreachable management cluster: exit %d, %s", code, errOut)
	}
	code, _, errOut := execWinkube(t, "/usr/local/bin/kubectl-winkube", "ssh")
	if code != ExitBadInput || !strings.Contains(errOut, "kubectl winkube ssh MACHINE|NODE") || !strings.Contains(errOut, "'kubectl winkube ssh --help'") {
		t.Fatalf("as kubectl's plugin: %d %s", code, errOut)
	}
	// The plugin offers what makes sense against existing clusters only.
	for _, local := range []string{"up", "down", "bench", "manager", "emulator", "admission"} {
		if code, _, errOut := execWinkube(t, "kubectl-winkube", local); code != ExitBadInput || !strings.Contains(errOut, "unknown command") {
			t.Errorf("kubectl winkube %s: %d %s", local, code, errOut)
		}
	}
	code, out, _ := execWinkube(t, "kubectl-winkube", "--help")
	if code != ExitOK || strings.Contains(out, "winkube winkube") || !strings.Contains(out, "kubectl winkube [command]") || strings.Contains(out, "  up ") {
		t.Fatalf("kubectl winkube --help:\n%s", out)
	}
}

// TestCompletion asks the commands for completions as a shell does.
func TestCompletion(t *testing.T) {
	complete := func(arg0 string, args ...string) []string {
		code, out, errOut := execWinkube(t, arg0, append([]string{"__complete"}, args...)...)
		if code != ExitOK {
			t.Fatalf("__complete %v: %d %s", args, code, errOut)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, ":") && l != "" {
				got = append(got, strings.SplitN(l, "\t", 2)[0])
			}
		}
		return got
	}
	has := func(got []string, want ...string) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("completions %v lack %s", got, w)
			}
		}
	}
	has(complete("winkube", "generate", "cluster", "--flavor", ""), "windows", "machinepool-windows", "windows-flannel")
	has(complete("winkube", "up", "--windows-version", ""), "2019", "2022", "2025")
	has(complete("winkube", "up", "--kubernetes-version", ""), "v1.36.3", "v1.36.0", "v1.35.0")
	has(complete("winkube", "version", "-o", ""), "short", "json", "yaml")
	has(complete("winkube", "generate", "cluster", "-o", ""), "yaml", "json")
	has(complete("winkube", "gen"), "generate")
	has(complete("kubectl-winkube", ""), "ssh", "rdp", "logs", "generate", "version")
	for _, c := range complete("kubectl-winkube", "") {
		if c == "up" || c == "manager" {
			t.Errorf("the plugin completes %s", c)
		}
	}
	// Local worlds are the state directories under ~/.winkube with a
	// management kubeconfig.
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, w := range []string{"alpha", "beta"} {
		if err := os.MkdirAll(filepath.Join(home, ".winkube", w), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, ".winkube", "alpha", "management.kubeconfig"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got := complete("winkube", "down", "")
	if len(got) != 1 || got[0] != "alpha" {
		t.Errorf("down completes %v, want the one world alpha", got)
	}
	has(complete("winkube", "ssh", "--local", ""), "alpha")
}
