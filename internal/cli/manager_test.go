package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/winkube/winkube/internal/incluster"
)

func TestManagerRefusesIncompleteEmulatorFlags(t *testing.T) {
	if _, err := run(t, "manager", "--arm-endpoint", "https://127.0.0.1:8443"); err == nil || !strings.Contains(err.Error(), "needs --entra-endpoint") {
		t.Fatalf("an endpoint without its Entra ID: %v", err)
	}
	if _, err := run(t, "manager", "--arm-token", "x"); err == nil || !strings.Contains(err.Error(), "unknown flag") {
		t.Fatalf("the static token is gone from the product, yet: %v", err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "manager", "--arm-endpoint", "https://127.0.0.1:8443", "--arm-ca-file", notPEM, "--entra-endpoint", "https://127.0.0.1:8444"); err == nil || !strings.Contains(err.Error(), "not PEM") {
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

func TestManagerRefusesBadLoggingFlags(t *testing.T) {
	if _, err := run(t, "manager", "--log-format", "xml"); err == nil || !strings.Contains(err.Error(), "text or json") {
		t.Fatalf("--log-format xml: %v", err)
	}
	if _, err := run(t, "manager", "-v", "-1"); err == nil || !strings.Contains(err.Error(), "0 or more") {
		t.Fatalf("-v -1: %v", err)
	}
}

func TestManagerJSONLogsHonourVerbosity(t *testing.T) {
	var b strings.Builder
	log, err := incluster.NewLogger(&b, "json", 1)
	if err != nil {
		t.Fatal(err)
	}
	log.V(1).Info("shown", "k", "v")
	log.V(2).Info("hidden")
	out := b.String()
	if !strings.Contains(out, `"msg":"shown"`) || !strings.Contains(out, `"k":"v"`) || strings.Contains(out, "hidden") {
		t.Fatalf("json log at -v 1:\n%s", out)
	}
}
