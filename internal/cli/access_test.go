package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Invoked as kubectl's plugin, winkube speaks of 'kubectl winkube'.
func TestKubectlPlugin(t *testing.T) {
	for arg0, want := range map[string]string{"/usr/local/bin/kubectl-winkube": "kubectl winkube ssh MACHINE|NODE", "bin/winkube": "winkube ssh MACHINE|NODE"} {
		root := NewRootCommandFor(arg0)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs([]string{"ssh", "--help"})
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "Usage:\n  "+want) {
			t.Errorf("%s ssh --help:\n%s", arg0, out.String())
		}
	}
}

// Bad input is refused before anything is read or dialled.
func TestAccessCommandsRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"ssh"}, "name the node"},
		{[]string{"ssh", "a", "b"}, "one node at a time"},
		{[]string{"ssh", "node", "--state-dir", dir, "--", "hostname"}, "no local world in " + dir},
		{[]string{"rdp"}, "name the node: winkube rdp MACHINE|NODE"},
		{[]string{"logs", "node", "--since", "-5m", "--state-dir", dir}, "positive duration"},
	}
	// A stopped world: its kubeconfig stays, its API server is gone.
	stopped := t.TempDir()
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: m, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"contexts: [{name: m, context: {cluster: m, user: m}}]\ncurrent-context: m\nusers: [{name: m, user: {token: x}}]\n"
	if err := os.WriteFile(filepath.Join(stopped, "management.kubeconfig"), []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		args []string
		want string
	}{[]string{"logs", "node", "--state-dir", stopped}, "is not running (start it again with 'winkube up')"})
	for _, c := range cases {
		root := NewRootCommand()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(c.args)
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("winkube %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
