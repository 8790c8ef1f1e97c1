package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/winkube/winkube/internal/nodejoin"
)

// TestNodeJoinOptionsValidate: what no cluster would change is refused
// before the management cluster is asked, as bad input naming the flag and
// what to write instead.
func TestNodeJoinOptionsValidate(t *testing.T) {
	valid := func() nodeJoinOptions {
		return nodeJoinOptions{Join: nodejoin.Options{Node: "byo-win-1", TokenTTL: nodejoin.DefaultTokenTTL, Wait: 10 * time.Minute},
			WindowsVersion: "2022", ssh: machineSSH{user: "capi"}}
	}
	for _, c := range []struct {
		name   string
		change func(*nodeJoinOptions)
		want   string // "" for valid
	}{
		{"defaults: print the script", func(*nodeJoinOptions) {}, ""},
		{"over SSH", func(o *nodeJoinOptions) { o.ssh.address = "127.0.0.50" }, ""},
		{"over SSH on a port", func(o *nodeJoinOptions) { o.ssh.address = "127.0.0.50:2222" }, ""},
		{"over SSH to IPv6", func(o *nodeJoinOptions) { o.ssh.address = "[fd00::5]:22" }, ""},
		{"no wait", func(o *nodeJoinOptions) { o.Join.Wait = 0 }, ""},
		{"Windows Server 2016", func(o *nodeJoinOptions) { o.WindowsVersion = "2016" }, `--windows-version "2016": use 2019, 2022 or 2025`},
		{"a containerd tag", func(o *nodeJoinOptions) { o.Join.ContainerdVersion = "v1.7.25" }, `--containerd-version "v1.7.25" is not a release such as 1.7.25`},
		{"a negative wait", func(o *nodeJoinOptions) { o.Join.Wait = -time.Minute }, "--wait -1m0s: want how long to wait for the node, such as 10m (0: do not wait)"},
		{"a URL as the SSH address", func(o *nodeJoinOptions) { o.ssh.address = "ssh://10.1.0.5" }, `--ssh "ssh://10.1.0.5": give the machine's HOST or HOST:PORT`},
		{"an SSH port past 65535", func(o *nodeJoinOptions) { o.ssh.address = "10.1.0.5:70000" }, `--ssh "10.1.0.5:70000": the port must be from 1 to 65535`},
		{"an SSH port by name", func(o *nodeJoinOptions) { o.ssh.address = "10.1.0.5:ssh" }, `--ssh "10.1.0.5:ssh": the port must be from 1 to 65535`},
		{"no user", func(o *nodeJoinOptions) { o.ssh.user = "" }, `--user "": name the user to log in as`},
	} {
		o := valid()
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}

// TestNodeLeaveOptionsValidate likewise for leave.
func TestNodeLeaveOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name  string
		drain time.Duration
		addr  string
		want  string // "" for valid
	}{
		{"defaults", 5 * time.Minute, "", ""},
		{"over SSH", time.Minute, "127.0.0.50", ""},
		{"no drain", 0, "", "--drain-timeout 0s: want how long the node's pods may take to be evicted, such as 5m"},
		{"a negative drain", -time.Second, "", "--drain-timeout -1s"},
		{"an SSH address with a path", time.Minute, "10.1.0.5/22", `--ssh "10.1.0.5/22": give the machine's HOST or HOST:PORT`},
	} {
		o := nodeLeaveOptions{Node: "byo-win-1", DrainTimeout: c.drain, ssh: machineSSH{address: c.addr, user: "capi"}}
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}

// TestNodeCommandsRefuseBeforeAskingTheCluster: a zero --drain-timeout
// (which fails the drain once the node is cordoned) and an --ssh port no
// machine listens on were found only after the cluster was asked.
func TestNodeCommandsRefuseBeforeAskingTheCluster(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "leave", "byo-win-1", "--drain-timeout", "0s"}, "--drain-timeout 0s"},
		{[]string{"node", "join", "byo-win-1", "--ssh", "10.1.0.5:70000"}, `--ssh "10.1.0.5:70000"`},
	} {
		_, err := run(t, append(c.args, "--kubeconfig", "/nonexistent")...)
		var u *UsageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "winkube "+strings.Join(c.args[:2], " ")+" --help") {
			t.Errorf("%v: %v, want bad input with %q and the command's --help", c.args, err, c.want)
		}
	}
}
