package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestManagerRefusesIncompleteEmulatorFlags(t *testing.T) {
	if _, err := run(t, "manager", "--arm-endpoint", "https://127.0.0.1:8443"); err == nil || !strings.Contains(err.Error(), "--arm-ca-file and --arm-token") {
		t.Fatalf("an endpoint without CA and token: %v", err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "manager", "--arm-endpoint", "https://127.0.0.1:8443", "--arm-ca-file", notPEM, "--arm-token", "x"); err == nil || !strings.Contains(err.Error(), "not PEM") {
		t.Fatalf("a CA file that is not PEM: %v", err)
	}
	if _, err := run(t, "manager", "--concurrency", "0"); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Fatalf("concurrency 0: %v", err)
	}
}

func TestAdmissionRefusesUnknownPolicy(t *testing.T) {
	if _, err := run(t, "admission", "--registry-failure-policy", "sometimes"); err == nil || !strings.Contains(err.Error(), "open or closed") {
		t.Fatalf("unknown policy: %v", err)
	}
}
