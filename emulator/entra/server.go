package entra

import (
	"crypto/sha1" //nolint:gosec // x5t is a SHA-1 thumbprint by definition
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Server serves a directory over HTTPS: an authority host such as
// login.microsoftonline.com is.
type Server struct {
	Dir      *Directory
	listener net.Listener
	http     *http.Server
	wg       sync.WaitGroup
}

// Serve starts serving the directory on addr with a TLS certificate valid
// for the address's host.
func Serve(d *Directory, addr string, cert tls.Certificate) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("entra: %w", err)
	}
	s := &Server{Dir: d, listener: ln}
	s.http = &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = s.http.ServeTLS(ln, "", "") }()
	return s, nil
}

// URL is the authority host, https://host:port.
func (s *Server) URL() string { return "https://" + s.listener.Addr().String() }

// ManagedIdentityEndpoint is what IDENTITY_ENDPOINT must be for Azure SDKs
// to ask this directory for managed-identity tokens (with IDENTITY_HEADER
// set to the directory's IdentityHeader), as on App Service.
func (s *Server) ManagedIdentityEndpoint() string { return s.URL() + managedIdentityPath }

// Close stops serving.
func (s *Server) Close() error {
	err := s.http.Close()
	s.wg.Wait()
	return err
}

const managedIdentityPath = "/msi/token"

// ServeHTTP answers OIDC discovery, JWKS, token and managed-identity
// requests.
func (d *Directory) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	authority := "https://" + r.Host
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == managedIdentityPath && r.Method == http.MethodGet:
		rec := &statusRecorder{ResponseWriter: w}
		d.serveManagedIdentity(rec, r, authority)
		d.recordOutcome(r.URL.Query().Get("client_id"), rec.status)
	case len(seg) == 3 && seg[0] == "common" && seg[1] == "discovery" && seg[2] == "instance":
		d.serveInstanceDiscovery(w, r, authority)
	case len(seg) == 4 && seg[1] == "v2.0" && seg[2] == ".well-known" && seg[3] == "openid-configuration":
		d.serveOpenIDConfiguration(w, seg[0], authority)
	case len(seg) == 4 && seg[1] == "discovery" && seg[2] == "v2.0" && seg[3] == "keys",
		len(seg) == 3 && seg[1] == "discovery" && seg[2] == "keys":
		writeJSON(w, http.StatusOK, d.publicJWKS())
	case len(seg) == 4 && seg[1] == "oauth2" && seg[2] == "v2.0" && seg[3] == "token" && r.Method == http.MethodPost:
		rec := &statusRecorder{ResponseWriter: w}
		d.serveToken(rec, r, seg[0], authority)
		d.recordOutcome(r.PostForm.Get("client_id"), rec.status)
	default:
		http.NotFound(w, r)
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// oauthError is the token endpoint's error body, with Entra's AADSTS code.
func oauthError(w http.ResponseWriter, status int, kind string, code int, format string, args ...any) {
	writeJSON(w, status, map[string]any{
		"error":             kind,
		"error_description": fmt.Sprintf("AADSTS%d: ", code) + fmt.Sprintf(format, args...) + " Trace ID: " + NewGUID() + " Correlation ID: " + NewGUID() + " Timestamp: " + time.Now().UTC().Format("2006-01-02 15:04:05Z"),
		"error_codes":       []int{code},
		"timestamp":         time.Now().UTC().Format("2006-01-02 15:04:05Z"),
		"trace_id":          NewGUID(),
		"correlation_id":    NewGUID(),
	})
}

func (d *Directory) serveInstanceDiscovery(w http.ResponseWriter, r *http.Request, authority string) {
	tenant := "common"
	if u, err := url.Parse(r.URL.Query().Get("authorization_endpoint")); err == nil {
		if p := strings.Split(strings.Trim(u.Path, "/"), "/"); len(p) > 0 && p[0] != "" {
			tenant = p[0]
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"tenant_discovery_endpoint": authority + "/" + tenant + "/v2.0/.well-known/openid-configuration",
		"api-version":               "1.1",
		"metadata":                  []map[string]any{{"preferred_network": r.Host, "preferred_cache": r.Host, "aliases": []string{r.Host}}},
	})
}

func (d *Directory) knownTenant(tenant string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.principals {
		if strings.EqualFold(p.TenantID, tenant) {
			return true
		}
	}
	return false
}

func (d *Directory) serveOpenIDConfiguration(w http.ResponseWriter, tenant, authority string) {
	if !d.knownTenant(tenant) {
		oauthError(w, http.StatusBadRequest, "invalid_tenant", 90002, "Tenant '%s' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.", tenant)
		return
	}
	base := authority + "/" + tenant
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                base + "/v2.0",
		"authorization_endpoint":                base + "/oauth2/v2.0/authorize",
		"token_endpoint":                        base + "/oauth2/v2.0/token",
		"jwks_uri":                              base + "/discovery/v2.0/keys",
		"token_endpoint_auth_methods_supported": []string{"client_secret_post", "private_key_jwt", "client_secret_basic"},
		"response_types_supported":              []string{"code", "id_token", "code id_token", "id_token token"},
		"subject_types_supported":               []string{"pairwise"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"scopes_supported":                      []string{"openid", "profile", "email", "offline_access"},
		"tenant_region_scope":                   "EU",
		"cloud_instance_name":                   "emulator",
	})
}

const assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

func (d *Directory) serveToken(w http.ResponseWriter, r *http.Request, tenant, authority string) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", 900144, "The request body must contain the following parameter: 'grant_type'.")
		return
	}
	f := r.PostForm
	clientID := f.Get("client_id")
	if id, secret, ok := r.BasicAuth(); ok && clientID == "" {
		clientID = id
		f.Set("client_secret", secret)
	}
	d.countRequest(clientID)
	if f.Get("grant_type") != "client_credentials" {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", 70003, "The app requested an unsupported grant type '%s'.", f.Get("grant_type"))
		return
	}
	if clientID == "" {
		oauthError(w, http.StatusBadRequest, "invalid_request", 900144, "The request body must contain the following parameter: 'client_id'.")
		return
	}
	if !d.knownTenant(tenant) {
		oauthError(w, http.StatusBadRequest, "invalid_request", 90002, "Tenant '%s' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.", tenant)
		return
	}
	p, ok := d.Principal(clientID)
	if !ok || p.Kind != ServicePrincipal || !strings.EqualFold(p.TenantID, tenant) {
		oauthError(w, http.StatusBadRequest, "unauthorized_client", 700016, "Application with identifier '%s' was not found in the directory '%s'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You may have sent your authentication request to the wrong tenant.", clientID, tenant)
		return
	}
	// MSAL adds the OIDC scopes to every request; the resource is the one
	// scope ending in /.default.
	var resource string
	ok = false
	for _, sc := range strings.Fields(f.Get("scope")) {
		switch sc {
		case "openid", "offline_access", "profile":
			continue
		}
		resource, ok = strings.CutSuffix(sc, "/.default")
	}
	if !ok || resource == "" {
		oauthError(w, http.StatusBadRequest, "invalid_scope", 1002012, "The provided value for scope %s is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI).", f.Get("scope"))
		return
	}
	acr := "1"
	switch {
	case f.Get("client_secret") != "":
		if !containsSecret(p.Secrets, f.Get("client_secret")) {
			oauthError(w, http.StatusUnauthorized, "invalid_client", 7000215, "Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '%s'.", p.ClientID)
			return
		}
	case f.Get("client_assertion_type") == assertionType && f.Get("client_assertion") != "":
		acr = "2"
		if err := d.checkAssertion(p, f.Get("client_assertion"), authority+"/"+tenant+"/oauth2/v2.0/token"); err != nil {
			err.write(w)
			return
		}
	default:
		oauthError(w, http.StatusUnauthorized, "invalid_client", 7000218, "The request body must contain the following parameter: 'client_assertion' or 'client_secret'.")
		return
	}
	d.writeToken(w, authority, p, resource, acr, false)
}

func containsSecret(secrets []string, s string) bool {
	for _, x := range secrets {
		if x == s {
			return true
		}
	}
	return false
}

func (d *Directory) writeToken(w http.ResponseWriter, authority string, p Principal, resource, acr string, managed bool) {
	tok, exp, err := d.issue(authority, p, resource, acr)
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error", 50000, "There was an error issuing a token.")
		return
	}
	if managed {
		// App Service's managed-identity answer: expires_on in epoch seconds.
		writeJSON(w, http.StatusOK, map[string]any{
			"access_token": tok, "expires_on": strconv.FormatInt(exp.Unix(), 10), "resource": resource, "token_type": "Bearer", "client_id": p.ClientID,
		})
		return
	}
	secs := int(time.Until(exp).Seconds())
	writeJSON(w, http.StatusOK, map[string]any{"token_type": "Bearer", "expires_in": secs, "ext_expires_in": secs, "access_token": tok})
}

// assertionError is a refused client assertion.
type assertionError struct {
	code int
	msg  string
}

func (e *assertionError) write(w http.ResponseWriter) {
	oauthError(w, http.StatusUnauthorized, "invalid_client", e.code, "%s", e.msg)
}

func refuse(code int, format string, args ...any) *assertionError {
	return &assertionError{code: code, msg: fmt.Sprintf(format, args...)}
}

// checkAssertion verifies a client assertion: a JWT the client signed with
// a registered certificate's key (x5t or x5t#S256 names the certificate),
// or a federated token from a trusted issuer whose subject and audience
// match one of the principal's federated credentials.
func (d *Directory) checkAssertion(p Principal, assertion, tokenEndpoint string) *assertionError {
	unverified, _, err := jwt.NewParser().ParseUnverified(assertion, jwt.MapClaims{})
	if err != nil {
		return refuse(50027, "JWT token is invalid or malformed.")
	}
	claims := unverified.Claims.(jwt.MapClaims)
	iss, _ := claims.GetIssuer()
	if _, hasX5t := unverified.Header["x5t"]; hasX5t || unverified.Header["x5t#S256"] != nil || strings.EqualFold(iss, p.ClientID) {
		return d.checkCertificateAssertion(p, unverified.Header, assertion, tokenEndpoint)
	}
	return d.checkFederatedAssertion(p, assertion, iss, claims)
}

func (d *Directory) checkCertificateAssertion(p Principal, header map[string]any, assertion, tokenEndpoint string) *assertionError {
	var match func([]byte) bool
	if t, ok := header["x5t#S256"].(string); ok {
		match = func(der []byte) bool { s := sha256.Sum256(der); return thumbEqual(t, s[:]) }
	} else if t, ok := header["x5t"].(string); ok {
		match = func(der []byte) bool { s := sha1.Sum(der); return thumbEqual(t, s[:]) } //nolint:gosec
	} else {
		return refuse(700027, "Client assertion contains an invalid signature. [Reason - The key was not found., Thumbprint of key used by client: '']")
	}
	var key any
	for _, c := range p.Certificates {
		cert, err := parseCert([]byte(c))
		if err == nil && match(cert.Raw) {
			if time.Now().After(cert.NotAfter) {
				return refuse(700027, "Client assertion contains an invalid signature. [Reason - The provided client certificate has expired.]")
			}
			key = cert.PublicKey
		}
	}
	if key == nil {
		return refuse(700027, "The certificate with identifier used to sign the client assertion is not registered on application. [Reason - The key was not found.] Please visit the Azure Portal, Graph Explorer or directly use MS Graph to see configured keys for app Id '%s'.", p.ClientID)
	}
	var c jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(assertion, &c, func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{"PS256", "RS256"}), jwt.WithoutClaimsValidation())
	if err != nil {
		return refuse(700027, "Client assertion failed signature validation.")
	}
	if c.Subject != p.ClientID || c.Issuer != p.ClientID {
		return refuse(700023, "Client assertion audience claim does not match Realm issuer. The iss and sub claims must be the client ID '%s'.", p.ClientID)
	}
	if !audienceMatches(c.Audience, []string{tokenEndpoint, strings.TrimSuffix(tokenEndpoint, "/oauth2/v2.0/token")}) {
		return refuse(700016, "Invalid audience '%s' in the client assertion; it must be the token endpoint '%s'.", strings.Join(c.Audience, ","), tokenEndpoint)
	}
	if c.ExpiresAt == nil || time.Now().After(c.ExpiresAt.Time) {
		return refuse(700024, "Client assertion is not within its valid time range.")
	}
	return nil
}

func thumbEqual(got string, want []byte) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(got); err == nil && string(b) == string(want) {
			return true
		}
	}
	return false
}

func audienceMatches(got jwt.ClaimStrings, want []string) bool {
	for _, a := range got {
		for _, w := range want {
			if strings.EqualFold(strings.TrimRight(a, "/"), strings.TrimRight(w, "/")) {
				return true
			}
		}
	}
	return false
}

func (d *Directory) checkFederatedAssertion(p Principal, assertion, iss string, claims jwt.MapClaims) *assertionError {
	sub, _ := claims.GetSubject()
	aud, _ := claims.GetAudience()
	var fc *FederatedCredential
	for i, c := range p.FederatedCredentials {
		auds := c.Audiences
		if len(auds) == 0 {
			auds = []string{DefaultFederatedAudience}
		}
		if c.Issuer == iss && c.Subject == sub && audienceMatches(aud, auds) {
			fc = &p.FederatedCredentials[i]
		}
	}
	if fc == nil {
		return refuse(70021, "No matching federated identity record found for presented assertion. Assertion Issuer: '%s'. Assertion Subject: '%s'. Assertion Audience: '%s'.", iss, sub, strings.Join(aud, ","))
	}
	keys, err := d.issuerKeys(iss)
	if err != nil {
		return refuse(50166, "Request to External OIDC endpoint failed: %v", err)
	}
	var lastErr error
	var c jwt.RegisteredClaims
	for _, k := range keys.key(headerKid(assertion)) {
		if _, lastErr = jwt.ParseWithClaims(assertion, &c, func(*jwt.Token) (any, error) { return k, nil },
			jwt.WithValidMethods([]string{"RS256", "ES256", "PS256"}), jwt.WithoutClaimsValidation()); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		return refuse(700027, "Client assertion failed signature validation.")
	}
	if c.ExpiresAt == nil || time.Now().After(c.ExpiresAt.Time) {
		return refuse(700024, "Client assertion is not within its valid time range. Current time: %s, assertion valid to: %v.", time.Now().UTC().Format(time.RFC3339), c.ExpiresAt)
	}
	return nil
}

func headerKid(token string) string {
	t, _, err := jwt.NewParser().ParseUnverified(token, jwt.MapClaims{})
	if err != nil {
		return ""
	}
	kid, _ := t.Header["kid"].(string)
	return kid
}

// issuerKeys returns a trusted issuer's keys, read through its OIDC
// discovery document when they were not given.
func (d *Directory) issuerKeys(issuer string) (*jwks, error) {
	d.mu.Lock()
	set, trusted := d.issuers[issuer]
	d.mu.Unlock()
	if !trusted {
		return nil, fmt.Errorf("issuer '%s' is not trusted by this directory", issuer)
	}
	if set != nil {
		return set, nil
	}
	get := func(u string) ([]byte, error) {
		resp, err := d.opts.IssuerClient.Get(u)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	}
	b, err := get(strings.TrimRight(issuer, "/") + "/.well-known/openid-configuration")
	if err != nil {
		return nil, err
	}
	var doc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.JWKSURI == "" {
		return nil, errors.New("the issuer's OIDC configuration has no jwks_uri")
	}
	if b, err = get(doc.JWKSURI); err != nil {
		return nil, err
	}
	return parseJWKS(b)
}

// serveManagedIdentity is App Service's managed-identity endpoint
// (api-version 2019-08-01): the caller proves it runs on the host with
// X-IDENTITY-HEADER and names a user-assigned identity.
func (d *Directory) serveManagedIdentity(w http.ResponseWriter, r *http.Request, authority string) {
	q := r.URL.Query()
	clientID := q.Get("client_id")
	d.countRequest(clientID)
	fail := func(status int, msg string) {
		writeJSON(w, status, map[string]any{"statusCode": status, "message": msg, "correlationId": NewGUID()})
	}
	if r.Header.Get("X-IDENTITY-HEADER") != d.opts.IdentityHeader {
		fail(http.StatusUnauthorized, "The X-IDENTITY-HEADER header is missing or does not match this host's IDENTITY_HEADER.")
		return
	}
	if q.Get("api-version") != "2019-08-01" {
		fail(http.StatusBadRequest, "An invalid or unsupported api-version was specified; this endpoint serves 2019-08-01.")
		return
	}
	resource := q.Get("resource")
	if resource == "" {
		fail(http.StatusBadRequest, "The resource parameter is required.")
		return
	}
	var p Principal
	found := false
	d.mu.Lock()
	for _, x := range d.principals {
		if x.Kind != ManagedIdentity {
			continue
		}
		if (clientID != "" && strings.EqualFold(x.ClientID, clientID)) || (q.Get("object_id") != "" && strings.EqualFold(x.ObjectID, q.Get("object_id"))) {
			p, found = *x, true
		}
	}
	d.mu.Unlock()
	if !found {
		fail(http.StatusBadRequest, "No User Assigned or Delegated Managed Identity found for specified ClientId/ResourceId/PrincipalId.")
		return
	}
	d.writeToken(w, authority, p, resource, "0", true)
}
