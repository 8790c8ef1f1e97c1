package entra

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"
)

// A P-256 key of an issuer's JWKS is read as the key it is, a coordinate
// with its leading zeros dropped too, and a point off the curve is refused.
func TestJWKSReadsP256Keys(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	doc := func(x, y []byte) []byte {
		return fmt.Appendf(nil, `{"keys":[{"kty":"EC","crv":"P-256","kid":"k","x":%q,"y":%q}]}`, enc(x), enc(y))
	}
	newKey := func() (*ecdsa.PublicKey, []byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		point, err := key.PublicKey.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return &key.PublicKey, point[1:33], point[33:]
	}
	reads := func(want *ecdsa.PublicKey, x, y []byte) {
		t.Helper()
		set, err := parseJWKS(doc(x, y))
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := set.key("k")[0].(*ecdsa.PublicKey); !ok || !got.Equal(want) {
			t.Fatalf("read %v, want %v", set.key("k")[0], want)
		}
	}

	key, x, y := newKey()
	reads(key, x, y)
	off := bytes.Clone(y)
	off[31] ^= 1
	if _, err := parseJWKS(doc(x, off)); err == nil {
		t.Fatal("a point off the curve was read as a key")
	}
	// One key in 256 has an x whose first octet is zero.
	for range 4096 {
		if key, x, y := newKey(); x[0] == 0 {
			reads(key, bytes.TrimLeft(x, "\x00"), y)
			return
		}
	}
	t.Log("no key with a leading zero came up")
}
