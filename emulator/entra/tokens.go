package entra

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// accessClaims are the claims of the access tokens the directory issues:
// those of Entra's v1.0 app-only tokens, which ARM reads.
type accessClaims struct {
	jwt.RegisteredClaims
	TenantID string `json:"tid"`
	AppID    string `json:"appid"`
	// AppIDACR is how the client authenticated: 1 secret, 2 certificate or
	// assertion, 0 none (managed identity).
	AppIDACR string `json:"appidacr"`
	ObjectID string `json:"oid"`
	IDType   string `json:"idtyp"`
	Version  string `json:"ver"`
}

// issue signs an access token for a principal and a resource.
func (d *Directory) issue(authority string, p Principal, resource, acr string) (string, time.Time, error) {
	now := time.Now()
	exp := now.Add(d.opts.TokenLifetime)
	c := accessClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: authority + "/" + p.TenantID + "/", Subject: p.ObjectID, Audience: jwt.ClaimStrings{resource},
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-5 * time.Minute)), ExpiresAt: jwt.NewNumericDate(exp),
			ID: NewGUID(),
		},
		TenantID: p.TenantID, AppID: p.ClientID, AppIDACR: acr, ObjectID: p.ObjectID, IDType: "app", Version: "1.0",
	}
	key, kid := d.signer()
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	t.Header["kid"] = kid
	s, err := t.SignedString(key)
	if err == nil {
		d.recordIssued(p.ClientID, s)
	}
	return s, exp, err
}

// IssueTokenForTest signs a token for a principal with a given audience and
// expiry, so tests can present ARM an expired or misdirected token.
func (d *Directory) IssueTokenForTest(p Principal, audience string, expires time.Time) (string, error) {
	now := time.Now()
	c := accessClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: "https://login.emulator/" + p.TenantID + "/", Subject: p.ObjectID, Audience: jwt.ClaimStrings{audience},
			IssuedAt: jwt.NewNumericDate(now.Add(-2 * time.Hour)), NotBefore: jwt.NewNumericDate(now.Add(-2 * time.Hour)), ExpiresAt: jwt.NewNumericDate(expires),
		},
		TenantID: p.TenantID, AppID: p.ClientID, AppIDACR: "1", ObjectID: p.ObjectID, IDType: "app", Version: "1.0",
	}
	key, kid := d.signer()
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	t.Header["kid"] = kid
	return t.SignedString(key)
}

// Caller is who an access token was issued to.
type Caller struct {
	TenantID, AppID, ObjectID string
	// Issuer is the token's iss: the authority it came from and its
	// tenant, https://<authority host>/<tenant>/.
	Issuer string
}

// Why a token is refused.
const (
	TokenInvalid       = "Invalid"
	TokenExpired       = "Expired"
	TokenWrongAudience = "WrongAudience"
)

// TokenError says why an access token is refused.
type TokenError struct {
	Reason   string
	Audience string    // for TokenWrongAudience
	Expired  time.Time // for TokenExpired
	Err      error
}

func (e *TokenError) Error() string { return e.Reason + ": " + fmt.Sprint(e.Err) }

// Authenticate verifies an access token the directory issued: its
// signature, its lifetime, and that its audience is one of audiences
// (compared as ARM does, with or without a trailing slash).
//
// ARM calls it for every request, and a caller presents the same token
// for up to an hour: a token whose signature checked out is remembered
// with its claims (verifiedClaims), so that only the claims are checked
// again, every time, against the clock, the audiences and the principals.
func (d *Directory) Authenticate(token string, audiences []string) (Caller, error) {
	key, keyID := d.signer()
	c, ok := d.verifiedClaims(token, keyID)
	if !ok {
		_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
			if kid, _ := t.Header["kid"].(string); kid != keyID {
				return nil, errors.New("unknown signing key")
			}
			return &key.PublicKey, nil
		}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithoutClaimsValidation())
		if err != nil {
			return Caller{}, &TokenError{Reason: TokenInvalid, Err: err}
		}
		d.rememberVerified(token, keyID, c)
	}
	if c.ExpiresAt == nil || !time.Now().Before(c.ExpiresAt.Time) {
		var exp time.Time
		if c.ExpiresAt != nil {
			exp = c.ExpiresAt.Time
		}
		return Caller{}, &TokenError{Reason: TokenExpired, Expired: exp, Err: errors.New("token expired")}
	}
	if c.NotBefore != nil && time.Now().Before(c.NotBefore.Time) {
		return Caller{}, &TokenError{Reason: TokenInvalid, Err: errors.New("token not yet valid")}
	}
	forUs := false
	for _, a := range c.Audience {
		for _, want := range audiences {
			if strings.TrimRight(a, "/") == strings.TrimRight(want, "/") {
				forUs = true
			}
		}
	}
	if !forUs {
		return Caller{}, &TokenError{Reason: TokenWrongAudience, Audience: strings.Join(c.Audience, ","), Err: errors.New("wrong audience")}
	}
	// A principal deleted since the token was issued no longer acts.
	if _, found := d.Principal(c.AppID); !found {
		return Caller{}, &TokenError{Reason: TokenInvalid, Err: errors.New("the principal no longer exists")}
	}
	return Caller{TenantID: c.TenantID, AppID: c.AppID, ObjectID: c.ObjectID, Issuer: c.Issuer}, nil
}

// maxVerifiedTokens bounds the tokens Authenticate remembers. Callers keep
// a token until shortly before it expires (azidentity refreshes it five
// minutes early), so a directory sees about one live token per principal
// and audience; the bound only stops a flood of distinct tokens from
// growing the directory.
const maxVerifiedTokens = 1024

// verifiedToken is a token whose signature the directory checked, with its
// claims, under the signing key kid.
type verifiedToken struct {
	claims accessClaims
	kid    string
}

// verifiedClaims returns the claims of a token already verified under the
// current signing key kid. A token past its expiry is forgotten and
// verified again, so that it is refused exactly as a token never seen
// before; one signed with a key since replaced is forgotten likewise.
func (d *Directory) verifiedClaims(token, kid string) (accessClaims, bool) {
	d.verifiedMu.Lock()
	defer d.verifiedMu.Unlock()
	v, ok := d.verified[token]
	if !ok {
		return accessClaims{}, false
	}
	if v.kid != kid || !time.Now().Before(v.claims.ExpiresAt.Time) {
		delete(d.verified, token)
		return accessClaims{}, false
	}
	return v.claims, true
}

// rememberVerified keeps a verified token until its expiry. Tokens that
// could not pass (no expiry, or already expired) are not kept. When the
// bound is reached, expired tokens go first, then any, down to three
// quarters of it, so that a flood of tokens pays for a sweep only now and
// then: a token forgotten is only verified again.
func (d *Directory) rememberVerified(token, kid string, c accessClaims) {
	now := time.Now()
	if c.ExpiresAt == nil || !now.Before(c.ExpiresAt.Time) {
		return
	}
	d.verifiedMu.Lock()
	defer d.verifiedMu.Unlock()
	if d.verified == nil {
		d.verified = map[string]verifiedToken{}
	}
	if len(d.verified) >= maxVerifiedTokens {
		for t, v := range d.verified {
			if !now.Before(v.claims.ExpiresAt.Time) {
				delete(d.verified, t)
			}
		}
		for t := range d.verified {
			if len(d.verified) <= maxVerifiedTokens*3/4 {
				break
			}
			delete(d.verified, t)
		}
	}
	d.verified[token] = verifiedToken{claims: c, kid: kid}
}

// jwks is a set of public keys by key ID.
type jwks struct {
	keys map[string]any
	all  []any
	raw  json.RawMessage
}

func (s *jwks) key(kid string) []any {
	if k, ok := s.keys[kid]; ok && kid != "" {
		return []any{k}
	}
	return s.all
}

func parseJWKS(b []byte) (*jwks, error) {
	var doc struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not a JWKS document: %w", err)
	}
	set := &jwks{keys: map[string]any{}, raw: append(json.RawMessage(nil), b...)}
	dec := base64.RawURLEncoding.DecodeString
	for _, k := range doc.Keys {
		var pub any
		switch k.Kty {
		case "RSA":
			n, err1 := dec(k.N)
			e, err2 := dec(k.E)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("key %s: bad modulus or exponent", k.Kid)
			}
			pub = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			if k.Crv != "P-256" {
				return nil, fmt.Errorf("key %s: curve %s not supported", k.Kid, k.Crv)
			}
			x, err1 := dec(k.X)
			y, err2 := dec(k.Y)
			if err1 != nil || err2 != nil || len(x) > 32 || len(y) > 32 {
				return nil, fmt.Errorf("key %s: bad point", k.Kid)
			}
			// RFC 7518 wants 32 octets a coordinate; a shorter one is
			// taken as a number with its leading zeros dropped.
			point := make([]byte, 65)
			point[0] = 4 // uncompressed
			copy(point[33-len(x):33], x)
			copy(point[65-len(y):], y)
			ec, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
			if err != nil {
				return nil, fmt.Errorf("key %s: bad point: %w", k.Kid, err)
			}
			pub = ec
		default:
			continue
		}
		set.keys[k.Kid] = pub
		set.all = append(set.all, pub)
	}
	if len(set.all) == 0 {
		return nil, errors.New("the JWKS holds no RSA or P-256 key")
	}
	return set, nil
}

// publicJWKS is the directory's own signing key as a JWKS document.
func (d *Directory) publicJWKS() map[string]any {
	enc := base64.RawURLEncoding.EncodeToString
	key, kid := d.signer()
	return map[string]any{"keys": []map[string]any{{
		"kty": "RSA", "use": "sig", "kid": kid, "alg": "RS256",
		"n": enc(key.PublicKey.N.Bytes()), "e": enc(big.NewInt(int64(key.PublicKey.E)).Bytes()),
	}}}
}

func (d *Directory) signer() (*rsa.PrivateKey, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.key, d.kid
}
