package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMachineCreateOptionsValidate: a release, a name or a user no cluster
// would change is refused before the management cluster is asked, as bad
// input naming the flag or argument.
func TestMachineCreateOptionsValidate(t *testing.T) {
	valid := func() machineCreateOptions {
		return machineCreateOptions{Name: "byo-win-1", Windows: "2022", User: "capi"}
	}
	for _, c := range []struct {
		name   string
		change func(*machineCreateOptions)
		want   string // "" for valid
	}{
		{"defaults", func(*machineCreateOptions) {}, ""},
		{"2025 with a size", func(o *machineCreateOptions) { o.Windows, o.Size = "2025", "Standard_D4s_v3" }, ""},
		{"15 characters", func(o *machineCreateOptions) { o.Name = "byo-win-1234567" }, ""},
		{"Windows Server 2016", func(o *machineCreateOptions) { o.Windows = "2016" }, `--windows "2016": use 2019, 2022 or 2025`},
		{"16 characters", func(o *machineCreateOptions) { o.Name = "byo-win-12345678" }, `NAME "byo-win-12345678" has 16 characters: a Windows computer name has at most 15`},
		{"no user", func(o *machineCreateOptions) { o.User = "" }, `--user "": name the SSH user to create, such as capi`},
		{"a blank user", func(o *machineCreateOptions) { o.User = " " }, `--user " "`},
	} {
		o := valid()
		c.change(&o)
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}

// TestMachineCreateRefusesBeforeAskingTheCluster: an empty --user and a
// private key given as --ssh-public-key were refused only after the
// management cluster was asked, in words that named no flag.
func TestMachineCreateRefusesBeforeAskingTheCluster(t *testing.T) {
	key := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(key, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key+".pub", []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "", "--ssh-public-key", key + ".pub"}, `--user "": name the SSH user to create`},
		{[]string{"--ssh-public-key", key}, "--ssh-public-key " + key + " names a private key: give the .pub file"},
	} {
		_, err := run(t, append([]string{"machine", "create", "byo-win-1", "--kubeconfig", "/nonexistent"}, c.args...)...)
		var u *UsageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "winkube machine create --help") {
			t.Errorf("%v: %v, want bad input with %q and the command's --help", c.args, err, c.want)
		}
	}
}
