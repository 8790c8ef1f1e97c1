package entra_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/golang-jwt/jwt/v5"
	certutil "k8s.io/client-go/util/cert"

	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/poll"
)

const tenant = "00000000-0000-4000-8000-00000000e4a0"

// serve runs the directory's real handler over TLS.
func serve(t *testing.T, d *entra.Directory) (*httptest.Server, azcore.ClientOptions) {
	t.Helper()
	srv := httptest.NewTLSServer(d)
	t.Cleanup(srv.Close)
	return srv, azcore.ClientOptions{Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: srv.URL}, Transport: srv.Client()}
}

func scope() policy.TokenRequestOptions {
	return policy.TokenRequestOptions{Scopes: []string{"https://management.example/.default"}}
}

func TestRolesFollowAzureRBAC(t *testing.T) {
	d, _ := entra.New(entra.Options{})
	for _, a := range []struct{ who, role, scope string }{{"r", "Reader", "/subscriptions/a"}, {"c", "Contributor", "/subscriptions/a/resourceGroups/g"}, {"o", "Owner", "/"}} {
		if err := d.AssignRole(a.who, a.role, a.scope); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.AssignRole("x", "Wizard", "/"); err == nil {
		t.Fatal("an unknown role was accepted")
	}
	for _, c := range []struct {
		who, action, scope string
		want               bool
	}{
		{"r", "Microsoft.Network/virtualNetworks/read", "/subscriptions/a/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v", true},
		{"r", "Microsoft.Network/virtualNetworks/write", "/subscriptions/a/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v", false},
		{"r", "Microsoft.Resources/subscriptions/resourceGroups/read", "/subscriptions/ab/resourcegroups/g", false},
		{"c", "Microsoft.Compute/virtualMachines/write", "/subscriptions/A/resourcegroups/G/providers/Microsoft.Compute/virtualMachines/vm", true},
		{"c", "Microsoft.Compute/virtualMachines/write", "/subscriptions/a/resourceGroups/other", false},
		{"c", "Microsoft.Authorization/roleAssignments/write", "/subscriptions/a/resourceGroups/g/providers/Microsoft.Authorization/roleAssignments/x", false},
		{"o", "Microsoft.Authorization/roleAssignments/write", "/subscriptions/z", true},
	} {
		if got := d.Authorized(c.who, c.action, c.scope); got != c.want {
			t.Errorf("%s %s over %s: %v, want %v", c.who, c.action, c.scope, got, c.want)
		}
	}
	if n := d.RemoveRoleAssignments("c", "/subscriptions/a/resourceGroups/g/"); n != 1 || d.Authorized("c", "Microsoft.Compute/virtualMachines/write", "/subscriptions/a/resourceGroups/g/x") {
		t.Fatalf("removing the assignment: %d", n)
	}
}

func TestStateKeepsPrincipalsAndSigningKey(t *testing.T) {
	d, _ := entra.New(entra.Options{})
	p, secret, err := d.CreateServicePrincipal(tenant, "kept")
	if err != nil {
		t.Fatal(err)
	}
	_ = d.AssignRole(p.ObjectID, "Contributor", "/subscriptions/a")
	tok, _ := d.IssueTokenForTest(p, "https://arm.example", time.Now().Add(time.Hour))
	path := filepath.Join(t.TempDir(), "entra.json")
	if err := d.Save(path); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the state file holding secrets is %v", fi.Mode().Perm())
	}
	d2, _ := entra.New(entra.Options{})
	if err := d2.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	if c, err := d2.Authenticate(tok, []string{"https://arm.example/"}); err != nil || c.ObjectID != p.ObjectID {
		t.Fatalf("a token from before the restart: %v %v", c, err)
	}
	if got, _ := d2.Principal(p.ClientID); len(got.Secrets) != 1 || got.Secrets[0] != secret || !d2.Authorized(p.ObjectID, "Microsoft.Network/virtualNetworks/write", "/subscriptions/a/x") {
		t.Fatalf("the principal or its role did not survive: %+v", got)
	}
}

func selfSigned(t *testing.T) (*x509.Certificate, *rsa.PrivateKey, []byte) {
	t.Helper()
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "app"}, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _ := certutil.EncodeCertificates(cert)
	return cert, key, certPEM
}

func TestCertificateAssertions(t *testing.T) {
	d, _ := entra.New(entra.Options{})
	_, opts := serve(t, d)
	p, _, _ := d.CreateServicePrincipal(tenant, "cert")
	cert, key, certPEM := selfSigned(t)
	if err := d.AddCertificate(p.ClientID, certPEM); err != nil {
		t.Fatal(err)
	}
	other, otherKey, _ := selfSigned(t)
	get := func(c *x509.Certificate, k *rsa.PrivateKey) error {
		cred, err := azidentity.NewClientCertificateCredential(tenant, p.ClientID, []*x509.Certificate{c}, k,
			&azidentity.ClientCertificateCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cred.GetToken(context.Background(), scope())
		return err
	}
	if err := get(cert, key); err != nil {
		t.Fatalf("the registered certificate: %v", err)
	}
	if err := get(other, otherKey); err == nil || !strings.Contains(err.Error(), "AADSTS700027") {
		t.Fatalf("an unregistered certificate: %v", err)
	}
}

func TestFederatedAndManagedIdentityRefusals(t *testing.T) {
	d, _ := entra.New(entra.Options{})
	srv, opts := serve(t, d)
	p, _, _ := d.CreateServicePrincipal(tenant, "wi")
	issuerKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	const issuer = "https://oidc.cluster.example"
	if err := d.AddFederatedCredential(p.ClientID, entra.FederatedCredential{Name: "m", Issuer: issuer, Subject: "system:serviceaccount:ns:sa"}); err != nil {
		t.Fatal(err)
	}
	token := func(sub string, key *rsa.PrivateKey) string {
		s, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: issuer, Subject: sub, Audience: jwt.ClaimStrings{entra.DefaultFederatedAudience},
			ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}).SignedString(key)
		return s
	}
	assert := func(tok string) error {
		cred, err := azidentity.NewClientAssertionCredential(tenant, p.ClientID, func(context.Context) (string, error) { return tok, nil },
			&azidentity.ClientAssertionCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cred.GetToken(context.Background(), scope())
		return err
	}
	// The issuer is not trusted yet: Entra cannot verify its tokens.
	if err := assert(token("system:serviceaccount:ns:sa", issuerKey)); err == nil || !strings.Contains(err.Error(), "AADSTS50166") {
		t.Fatalf("an untrusted issuer: %v", err)
	}
	jwks := `{"keys":[{"kty":"RSA","kid":"k","n":"` + b64(issuerKey.N.Bytes()) + `","e":"AQAB"}]}`
	if err := d.TrustIssuer(issuer, []byte(jwks)); err != nil {
		t.Fatal(err)
	}
	if err := assert(token("system:serviceaccount:ns:sa", issuerKey)); err != nil {
		t.Fatalf("the federated subject: %v", err)
	}
	if err := assert(token("system:serviceaccount:ns:other", issuerKey)); err == nil || !strings.Contains(err.Error(), "AADSTS70021") {
		t.Fatalf("another subject: %v", err)
	}
	forger, _ := rsa.GenerateKey(rand.Reader, 2048)
	if err := assert(token("system:serviceaccount:ns:sa", forger)); err == nil || !strings.Contains(err.Error(), "AADSTS700027") {
		t.Fatalf("a token the issuer did not sign: %v", err)
	}

	// App Service's managed-identity endpoint wants the host's header.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/msi/token?api-version=2019-08-01&resource=https://management.example&client_id="+p.ClientID, nil)
	req.Header.Set("X-IDENTITY-HEADER", "guess")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong identity header: %s", resp.Status)
	}
}

func b64(b []byte) string {
	return strings.TrimRight(strings.NewReplacer("+", "-", "/", "_").Replace(stdB64(b)), "=")
}

func stdB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// A verified token is remembered, and only its signature check is saved:
// past its expiry it is refused as expired (and forgotten), a remembered
// token is still refused for another audience or once the signing key
// changed, and the directory remembers a bounded number of tokens.
func TestRememberedTokensAreRefusedOnceExpired(t *testing.T) {
	d, _ := entra.New(entra.Options{})
	p, _, err := d.CreateServicePrincipal(tenant, "short-lived")
	if err != nil {
		t.Fatal(err)
	}
	const arm = "https://arm.example"
	// JWT expiries have whole seconds: two seconds from now is at least one.
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second)
	tok, err := d.IssueTokenForTest(p, arm, exp)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := d.Authenticate(tok, []string{arm}); err != nil || c.ObjectID != p.ObjectID {
		t.Fatalf("a fresh token: %+v %v", c, err)
	}
	if n := d.VerifiedTokens(); n != 1 {
		t.Fatalf("%d tokens remembered after one was verified, want 1", n)
	}
	reason := func(err error) string {
		var te *entra.TokenError
		if !errors.As(err, &te) {
			return fmt.Sprintf("not a TokenError: %v", err)
		}
		return te.Reason
	}
	if _, err := d.Authenticate(tok, []string{"https://graph.example"}); reason(err) != entra.TokenWrongAudience {
		t.Fatalf("a remembered token for another audience: %v, want %s", err, entra.TokenWrongAudience)
	}
	poll.Until(t, 10*time.Second, func() string {
		_, err := d.Authenticate(tok, []string{arm})
		if err == nil {
			return "the token is still accepted"
		}
		var te *entra.TokenError
		if !errors.As(err, &te) || te.Reason != entra.TokenExpired || !te.Expired.Equal(exp) {
			t.Fatalf("the token past its expiry %s: %v, want %s at that time", exp, err, entra.TokenExpired)
		}
		return ""
	})
	if n := d.VerifiedTokens(); n != 0 {
		t.Fatalf("%d tokens remembered after the only one expired, want 0", n)
	}

	// A new signing key (a directory's state applied) voids the old
	// key's tokens, remembered or not.
	long, _ := d.IssueTokenForTest(p, arm, time.Now().Add(time.Hour))
	if _, err := d.Authenticate(long, []string{arm}); err != nil {
		t.Fatal(err)
	}
	other, _ := entra.New(entra.Options{})
	st, err := other.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(entra.Config{SigningKey: st.SigningKey}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Authenticate(long, []string{arm}); reason(err) != entra.TokenInvalid {
		t.Fatalf("a remembered token of a replaced key: %v, want %s", err, entra.TokenInvalid)
	}

	// Distinct tokens (one expiry second each) past the bound.
	for i := range entra.MaxVerifiedTokens + 10 {
		tok, err := d.IssueTokenForTest(p, arm, time.Now().Add(time.Hour+time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Authenticate(tok, []string{arm}); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.VerifiedTokens(); n > entra.MaxVerifiedTokens {
		t.Fatalf("%d tokens remembered, more than the bound %d", n, entra.MaxVerifiedTokens)
	}
}
