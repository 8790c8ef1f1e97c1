package incluster

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The manager image's command line refuses bad input with exit status 2
// and a pointer to --help, as the winkube binary does, and writes nothing
// to standard output.
func TestExecuteRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"manager", "--concurrency", "many"},
		{"admission", "--registry-failure-policy", "maybe"},
		{"manager", "--role-assignment-scopes", "subscriptions/x"},
		{"manager", "--role-assignment-scopes", "/subscriptions//resourceGroups/rg"},
	} {
		var out, errOut bytes.Buffer
		if code := Execute(context.Background(), args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr: %s", args, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), "winkube-manager "+args[0]+" --help") || !strings.Contains(errOut.String(), args[1]) {
			t.Errorf("%v: the message names neither the flag nor --help: %s", args, errOut.String())
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote to standard output: %q", args, out.String())
		}
	}
}
