package localworld

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// A new world's public addresses start in a /24 of its block that no
// kubectl discovery cache names: with caches for every /24 of the block but
// one (and for other addresses), that one is where it starts.
func TestNewWorldAvoidsCachedAddresses(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("KUBECACHEDIR", cache)
	for i := range 256 {
		if i == 77 {
			continue
		}
		if err := os.MkdirAll(filepath.Join(cache, "discovery", fmt.Sprintf("127.9.%d.2_6443", i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, other := range []string{"127.11.77.2_6443", "example.com_443", "127.9.77"} {
		if err := os.MkdirAll(filepath.Join(cache, "discovery", other), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		if got := publicIPStart(netip.MustParsePrefix("127.9.0.0/16")); got != netip.MustParseAddr("127.9.77.1") {
			t.Fatalf("a new world starts at %s, want 127.9.77.1, the one /24 no cache names", got)
		}
	}
}
