package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "winkube v") {
		t.Fatalf("winkube version = %q, %v", out, err)
	}
	out, err = run(t, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]string
	if err := json.Unmarshal([]byte(out), &info); err != nil || info["version"] == "" || info["goVersion"] == "" {
		t.Fatalf("json output %q does not carry the version: %v", out, err)
	}
	out, err = run(t, "version", "-o", "yaml")
	if err != nil || !strings.Contains(out, "version: v") {
		t.Fatalf("yaml output %q: %v", out, err)
	}
	if _, err := run(t, "version", "-o", "xml"); err == nil || !strings.Contains(err.Error(), "short, json, yaml") {
		t.Fatalf("an unknown format was not refused with the choices: %v", err)
	}
	if _, err := run(t, "version", "extra"); err == nil {
		t.Fatal("winkube version accepted an argument")
	}
}
