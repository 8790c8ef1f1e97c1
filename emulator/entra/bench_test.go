package entra_test

import (
	"testing"
	"time"

	"github.com/winkube/winkube/emulator/entra"
)

// BenchmarkAuthenticate is what ARM pays per request to check a bearer
// token: Remembered for the token a caller presents again (every request
// but its first), FirstSight for a token never seen (what every request
// paid before tokens were remembered: the RS256 signature check).
//
//	go test ./emulator/entra -run '^$' -bench Authenticate
func BenchmarkAuthenticate(b *testing.B) {
	d, _ := entra.New(entra.Options{})
	p, _, err := d.CreateServicePrincipal(tenant, "bench")
	if err != nil {
		b.Fatal(err)
	}
	const arm = "https://arm.example"
	audiences := []string{arm + "/"}
	b.Run("Remembered", func(b *testing.B) {
		tok, _ := d.IssueTokenForTest(p, arm, time.Now().Add(time.Hour))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := d.Authenticate(tok, audiences); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("FirstSight", func(b *testing.B) {
		// Distinct tokens (one expiry second each), signed before timing.
		toks := make([]string, b.N)
		for i := range toks {
			toks[i], _ = d.IssueTokenForTest(p, arm, time.Now().Add(time.Hour+time.Duration(i)*time.Second))
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := d.Authenticate(toks[i], audiences); err != nil {
				b.Fatal(err)
			}
		}
	})
}
