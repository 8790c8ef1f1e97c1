// Package entra is an emulator of Microsoft Entra ID (Azure AD) as Azure
// SDK credentials and Azure Resource Manager see it: tenants holding
// service principals (client secrets, certificates, federated credentials
// for workload identity) and managed identities, OIDC discovery, the v2.0
// token endpoint, the App Service managed-identity endpoint, and Azure RBAC
// role assignments that ARM consults. Tokens are RS256-signed JWTs that
// ARM verifies with the directory's key, as Azure's ARM verifies Entra's.
package entra

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Kinds of principals.
const (
	ServicePrincipal = "ServicePrincipal"
	ManagedIdentity  = "ManagedIdentity"
)

// Principal is a service principal (an application's identity in a tenant)
// or a user-assigned managed identity.
type Principal struct {
	// Kind is ServicePrincipal (the default) or ManagedIdentity.
	Kind        string `json:"kind,omitempty"`
	TenantID    string `json:"tenantID"`
	ClientID    string `json:"clientID"`
	ObjectID    string `json:"objectID"`
	DisplayName string `json:"displayName,omitempty"`
	// Secrets are the client secrets the service principal accepts.
	Secrets []string `json:"secrets,omitempty"`
	// Certificates are PEM certificates whose keys may sign client
	// assertions.
	Certificates []string `json:"certificates,omitempty"`
	// FederatedCredentials are the external tokens the principal trusts.
	FederatedCredentials []FederatedCredential `json:"federatedCredentials,omitempty"`
}

// FederatedCredential trusts tokens of one subject from one issuer (a
// Kubernetes cluster's service-account issuer, for workload identity).
type FederatedCredential struct {
	Name    string `json:"name"`
	Issuer  string `json:"issuer"`
	Subject string `json:"subject"`
	// Audiences default to api://AzureADTokenExchange.
	Audiences []string `json:"audiences,omitempty"`
}

// DefaultFederatedAudience is the audience Entra expects on federated
// tokens unless a credential says otherwise.
const DefaultFederatedAudience = "api://AzureADTokenExchange"

// RoleAssignment grants a built-in role (Owner, Contributor, Reader, ...)
// to a principal's object ID at a scope (a subscription, a resource group,
// a resource). Name is the assignment's GUID, as ARM's roleAssignments
// name it; one is made up when empty.
type RoleAssignment struct {
	Name        string    `json:"name,omitempty"`
	PrincipalID string    `json:"principalID"`
	Role        string    `json:"role"`
	Scope       string    `json:"scope"`
	CreatedOn   time.Time `json:"createdOn,omitzero"`
	CreatedBy   string    `json:"createdBy,omitempty"`
}

// TrustedIssuer is an external OIDC issuer and its signing keys (a JWKS);
// without keys they are read from the issuer's OIDC discovery document.
type TrustedIssuer struct {
	Issuer string          `json:"issuer"`
	JWKS   json.RawMessage `json:"jwks,omitempty"`
}

// Config is the directory's content, as a file holds it.
type Config struct {
	Principals      []Principal      `json:"principals,omitempty"`
	RoleAssignments []RoleAssignment `json:"roleAssignments,omitempty"`
	TrustedIssuers  []TrustedIssuer  `json:"trustedIssuers,omitempty"`
	// SigningKey (PKCS#8 PEM) keeps tokens issued before a restart valid;
	// a fresh key when empty.
	SigningKey string `json:"signingKey,omitempty"`
}

// Options configure a directory.
type Options struct {
	// TokenLifetime of issued access tokens; one hour (Entra's default for
	// app tokens is 60-90 minutes) when zero.
	TokenLifetime time.Duration
	// IssuerClient fetches external issuers' OIDC documents and keys.
	IssuerClient *http.Client
	// IdentityHeader is the secret the managed-identity endpoint expects in
	// X-IDENTITY-HEADER; random when empty.
	IdentityHeader string
	// OnChange, when set, is called after what Save writes may have
	// changed (a principal, a secret, a role assignment, an issuer, the
	// signing key), without the directory's lock held. It must return at
	// once: a caller that keeps the directory on disk as it changes marks
	// it dirty and saves later, so that a killed process loses no managed
	// identity or role assignment made through ARM.
	OnChange func()
}

// Directory is an Entra ID with its tenants' principals and the role
// assignments of Azure RBAC.
type Directory struct {
	opts Options
	key  *rsa.PrivateKey
	kid  string

	// saveMu orders Saves, so that an older snapshot never replaces a
	// newer one on disk.
	saveMu      sync.Mutex
	mu          sync.Mutex
	principals  map[string]*Principal // by lower-case client ID
	assignments []RoleAssignment
	issuers     map[string]*jwks // by issuer URL
	perClient   map[string]int64
	failures    map[string]int64
	issued      map[string][]string

	// verified are the access tokens whose signature Authenticate checked
	// (tokens.go); a lock of their own keeps ARM's requests off mu.
	verifiedMu sync.Mutex
	verified   map[string]verifiedToken

	tokenRequests atomic.Int64
}

// New creates an empty directory with a fresh signing key.
func New(opts Options) (*Directory, error) {
	if opts.TokenLifetime == 0 {
		opts.TokenLifetime = time.Hour
	}
	if opts.IssuerClient == nil {
		opts.IssuerClient = &http.Client{Timeout: 30 * time.Second}
	}
	if opts.IdentityHeader == "" {
		opts.IdentityHeader = randomHex(16)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	kid, err := keyID(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	return &Directory{
		opts: opts, key: key, kid: kid,
		principals: map[string]*Principal{}, issuers: map[string]*jwks{}, perClient: map[string]int64{},
		failures: map[string]int64{}, issued: map[string][]string{},
	}, nil
}

// changed tells OnChange that the directory's content changed.
func (d *Directory) changed() {
	if d.opts.OnChange != nil {
		d.opts.OnChange()
	}
}

// IdentityHeader is what a managed-identity client must send in
// X-IDENTITY-HEADER (App Service's IDENTITY_HEADER).
func (d *Directory) IdentityHeader() string { return d.opts.IdentityHeader }

// NewGUID returns a random GUID, the form of Entra's IDs.
func NewGUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newSecret looks like an Entra client secret: 40 characters.
func newSecret() string {
	b := make([]byte, 30)
	_, _ = rand.Read(b)
	return strings.NewReplacer("+", "~", "/", "_").Replace(base64.StdEncoding.EncodeToString(b))
}

// Apply adds a configuration's principals, role assignments and issuers.
func (d *Directory) Apply(c Config) error {
	if c.SigningKey != "" {
		if err := d.setKey([]byte(c.SigningKey)); err != nil {
			return err
		}
	}
	for _, p := range c.Principals {
		if err := d.AddPrincipal(p); err != nil {
			return err
		}
	}
	for _, a := range c.RoleAssignments {
		if err := d.addAssignment(a); err != nil {
			return err
		}
	}
	for _, i := range c.TrustedIssuers {
		if err := d.TrustIssuer(i.Issuer, i.JWKS); err != nil {
			return err
		}
	}
	return nil
}

func (d *Directory) setKey(pemBytes []byte) error {
	defer d.changed()
	k, err := keyutil.ParsePrivateKeyPEM(pemBytes)
	if err != nil {
		return fmt.Errorf("signingKey: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return errors.New("signingKey is not an RSA key")
	}
	kid, err := keyID(&rk.PublicKey)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.key, d.kid = rk, kid
	d.mu.Unlock()
	return nil
}

func keyID(pub *rsa.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:12]), nil
}

// Snapshot is the directory's content, signing key included.
func (d *Directory) Snapshot() (Config, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	der, err := x509.MarshalPKCS8PrivateKey(d.key)
	if err != nil {
		return Config{}, err
	}
	c := Config{SigningKey: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))}
	for _, p := range d.principals {
		c.Principals = append(c.Principals, *p)
	}
	sort.Slice(c.Principals, func(i, j int) bool { return c.Principals[i].ClientID < c.Principals[j].ClientID })
	c.RoleAssignments = append(c.RoleAssignments, d.assignments...)
	for iss, set := range d.issuers {
		c.TrustedIssuers = append(c.TrustedIssuers, TrustedIssuer{Issuer: iss, JWKS: set.raw})
	}
	sort.Slice(c.TrustedIssuers, func(i, j int) bool { return c.TrustedIssuers[i].Issuer < c.TrustedIssuers[j].Issuer })
	return c, nil
}

// Save writes the snapshot to a file only its owner can read: it holds
// secrets and the signing key.
func (d *Directory) Save(path string) error {
	c, err := d.Snapshot()
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	d.saveMu.Lock()
	defer d.saveMu.Unlock()
	// Written beside the file and renamed over it, so that a process
	// killed while saving leaves the previous directory, never half of
	// one; CreateTemp makes the file 0600 before a byte is written.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".entra-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// LoadFile applies a JSON Config file.
func (d *Directory) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := d.Apply(c); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// AddPrincipal adds a principal, or replaces the one with its client ID.
func (d *Directory) AddPrincipal(p Principal) error {
	if p.Kind == "" {
		p.Kind = ServicePrincipal
	}
	if p.Kind != ServicePrincipal && p.Kind != ManagedIdentity {
		return fmt.Errorf("principal %s: kind %q is neither %s nor %s", p.ClientID, p.Kind, ServicePrincipal, ManagedIdentity)
	}
	if p.TenantID == "" || p.ClientID == "" {
		return errors.New("a principal needs a tenantID and a clientID")
	}
	if p.ObjectID == "" {
		p.ObjectID = NewGUID()
	}
	for _, c := range p.Certificates {
		if _, err := parseCert([]byte(c)); err != nil {
			return fmt.Errorf("principal %s: %w", p.ClientID, err)
		}
	}
	defer d.changed()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.principals[strings.ToLower(p.ClientID)] = &p
	return nil
}

// CreateServicePrincipal registers an application and its service
// principal in a tenant with one client secret, as `az ad sp
// create-for-rbac` does, and returns it with the secret.
func (d *Directory) CreateServicePrincipal(tenantID, displayName string) (Principal, string, error) {
	secret := newSecret()
	p := Principal{Kind: ServicePrincipal, TenantID: tenantID, ClientID: NewGUID(), ObjectID: NewGUID(), DisplayName: displayName, Secrets: []string{secret}}
	if err := d.AddPrincipal(p); err != nil {
		return Principal{}, "", err
	}
	return p, secret, nil
}

// Principal returns the principal with a client ID.
func (d *Directory) Principal(clientID string) (Principal, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.principals[strings.ToLower(clientID)]
	if !ok {
		return Principal{}, false
	}
	return *p, true
}

func (d *Directory) update(clientID string, fn func(*Principal) error) error {
	defer d.changed()
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.principals[strings.ToLower(clientID)]
	if !ok {
		return fmt.Errorf("no principal with client ID %s", clientID)
	}
	return fn(p)
}

// ResetSecret replaces every client secret of a service principal with a
// new one (`az ad sp credential reset`) and returns it.
func (d *Directory) ResetSecret(clientID string) (string, error) {
	secret := newSecret()
	return secret, d.update(clientID, func(p *Principal) error { p.Secrets = []string{secret}; return nil })
}

// AddCertificate lets a certificate's key sign the principal's assertions.
func (d *Directory) AddCertificate(clientID string, certPEM []byte) error {
	if _, err := parseCert(certPEM); err != nil {
		return err
	}
	return d.update(clientID, func(p *Principal) error { p.Certificates = append(p.Certificates, string(certPEM)); return nil })
}

// AddFederatedCredential makes the principal trust an external subject.
func (d *Directory) AddFederatedCredential(clientID string, fc FederatedCredential) error {
	if fc.Issuer == "" || fc.Subject == "" {
		return errors.New("a federated credential needs an issuer and a subject")
	}
	return d.update(clientID, func(p *Principal) error { p.FederatedCredentials = append(p.FederatedCredentials, fc); return nil })
}

// TrustIssuer records an external issuer's keys (a JWKS document); nil keys
// mean they are fetched through the issuer's OIDC discovery when needed.
func (d *Directory) TrustIssuer(issuer string, keys []byte) error {
	defer d.changed()
	var set *jwks
	if len(keys) > 0 {
		var err error
		if set, err = parseJWKS(keys); err != nil {
			return fmt.Errorf("issuer %s: %w", issuer, err)
		}
	}
	d.mu.Lock()
	d.issuers[issuer] = set
	d.mu.Unlock()
	return nil
}

// AssignRole grants a built-in role to a principal's object ID at a scope;
// granting it again changes nothing.
func (d *Directory) AssignRole(principalID, role, scope string) error {
	return d.addAssignment(RoleAssignment{PrincipalID: principalID, Role: role, Scope: scope})
}

func (d *Directory) addAssignment(a RoleAssignment) error {
	defer d.changed()
	r, ok := RoleByName(a.Role)
	if !ok {
		return fmt.Errorf("role %q is not one of %s", a.Role, strings.Join(roleNames(), ", "))
	}
	if !strings.HasPrefix(a.Scope, "/") {
		return fmt.Errorf("scope %q is not a resource ID such as /subscriptions/<id>", a.Scope)
	}
	a.Role = r.Name
	if a.Name == "" {
		a.Name = NewGUID()
	}
	if a.CreatedOn.IsZero() {
		a.CreatedOn = time.Now().UTC()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.assignments {
		if sameGrant(x, a) {
			return nil
		}
	}
	d.assignments = append(d.assignments, a)
	return nil
}

// RemoveRoleAssignments removes a principal's assignments at a scope and
// says how many there were.
func (d *Directory) RemoveRoleAssignments(principalID, scope string) int {
	defer d.changed()
	d.mu.Lock()
	defer d.mu.Unlock()
	kept, n := d.assignments[:0], 0
	for _, a := range d.assignments {
		if strings.EqualFold(a.PrincipalID, principalID) && strings.EqualFold(strings.TrimRight(a.Scope, "/"), strings.TrimRight(scope, "/")) {
			n++
			continue
		}
		kept = append(kept, a)
	}
	d.assignments = kept
	return n
}

// TokenRequests is the number of token requests served (token endpoint
// and managed-identity endpoint), successful or not.
func (d *Directory) TokenRequests() int64 { return d.tokenRequests.Load() }

// TokenRequestsFor is the number of token requests naming a client ID.
func (d *Directory) TokenRequestsFor(clientID string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.perClient[strings.ToLower(clientID)]
}

func (d *Directory) countRequest(clientID string) {
	d.tokenRequests.Add(1)
	d.mu.Lock()
	d.perClient[strings.ToLower(clientID)]++
	d.mu.Unlock()
}

// TokenFailuresFor is the number of token requests naming a client ID
// that were refused.
func (d *Directory) TokenFailuresFor(clientID string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failures[strings.ToLower(clientID)]
}

// IssuedTokens are the last access tokens issued to a client ID, for tests
// that check no token leaks into logs.
func (d *Directory) IssuedTokens(clientID string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.issued[strings.ToLower(clientID)]...)
}

func (d *Directory) recordOutcome(clientID string, status int) {
	if status < 400 {
		return
	}
	d.mu.Lock()
	d.failures[strings.ToLower(clientID)]++
	d.mu.Unlock()
}

func (d *Directory) recordIssued(clientID, token string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := strings.ToLower(clientID)
	l := append(d.issued[k], token)
	if len(l) > 10 {
		l = l[len(l)-10:]
	}
	d.issued[k] = l
}

// parseCert is the first certificate of a PEM bundle, the one a
// principal's key signs with.
func parseCert(b []byte) (*x509.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(b)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}
