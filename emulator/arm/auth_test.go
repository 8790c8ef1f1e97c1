package arm_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azurecloud "github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/poll"
)

const authTenant = "00000000-0000-4000-8000-0000000a0de0"

// authWorld is an emulator that accepts only its Entra ID's tokens.
func authWorld(t *testing.T) (*entra.Directory, *arm.Server, *entra.Server, *http.Client) {
	t.Helper()
	return authWorldWith(t, nil)
}

// authWorldWith is authWorld with its options changed by mutate.
func authWorldWith(t *testing.T, mutate func(*arm.Options)) (*entra.Directory, *arm.Server, *entra.Server, *http.Client) {
	t.Helper()
	dir, err := entra.New(entra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := arm.Options{Directory: dir, PollInterval: 5 * time.Millisecond}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := arm.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cert, err := srv.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	login, err := entra.Serve(dir, "127.0.0.1:0", cert)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = login.Close() })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CACertPEM())
	return dir, srv, login, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// armGet sends a request with an Authorization header and returns ARM's
// status and error code.
func armRequest(t *testing.T, c *http.Client, method, url, auth string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{"location":"westeurope"}`))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error.Code, body.Error.Message
}

// TestARMChecksTokensAsAzureDoes: ARM refuses a missing, malformed,
// foreign, expired or misdirected token with Azure's codes, and a valid one
// without a role assignment with 403 AuthorizationFailed.
func TestARMChecksTokensAsAzureDoes(t *testing.T) {
	t.Parallel() // its directory and emulator are its own; the waiting tests leave it time
	dir, srv, _, c := authWorld(t)
	p, _, err := dir.CreateServicePrincipal(authTenant, "reader")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.AssignRole(p.ObjectID, "Reader", "/subscriptions/"+sub); err != nil {
		t.Fatal(err)
	}
	rg := srv.URL() + "/subscriptions/" + sub + "/resourcegroups/rg1?api-version=2021-04-01"
	good, err := dir.IssueTokenForTest(p, srv.URL(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expired, _ := dir.IssueTokenForTest(p, srv.URL(), time.Now().Add(-time.Minute))
	graph, _ := dir.IssueTokenForTest(p, "https://graph.microsoft.com", time.Now().Add(time.Hour))
	other, _ := entra.New(entra.Options{})
	_ = other.AddPrincipal(p)
	foreign, _ := other.IssueTokenForTest(p, srv.URL(), time.Now().Add(time.Hour))

	for _, tc := range []struct {
		name, method, auth string
		status             int
		code, message      string
	}{
		{"no header", http.MethodGet, "", 401, "AuthenticationFailed", "The 'Authorization' header is missing."},
		{"not bearer", http.MethodGet, "Basic eDp5", 401, "AuthenticationFailedInvalidHeader", "invalid format"},
		{"garbage", http.MethodGet, "Bearer not-a-jwt", 401, "InvalidAuthenticationToken", "The access token is invalid."},
		{"another directory's key", http.MethodGet, "Bearer " + foreign, 401, "InvalidAuthenticationToken", "The access token is invalid."},
		{"expired", http.MethodGet, "Bearer " + expired, 401, "ExpiredAuthenticationToken", "is earlier than current UTC time"},
		{"wrong audience", http.MethodGet, "Bearer " + graph, 401, "InvalidAuthenticationTokenAudience", "The access token has been obtained for wrong audience or resource 'https://graph.microsoft.com'"},
		{"reader writes", http.MethodPut, "Bearer " + good, 403, "AuthorizationFailed",
			"The client '" + p.ObjectID + "' with object id '" + p.ObjectID + "' does not have authorization to perform action 'Microsoft.Resources/subscriptions/resourceGroups/write' over scope '/subscriptions/" + sub + "/resourcegroups/rg1' or the scope is invalid."},
		{"reader reads", http.MethodGet, "Bearer " + good, 404, "ResourceGroupNotFound", ""},
	} {
		status, code, msg := armRequest(t, c, tc.method, rg, tc.auth)
		if status != tc.status || code != tc.code || !strings.Contains(msg, tc.message) {
			t.Errorf("%s: got %d %s %q, want %d %s containing %q", tc.name, status, code, msg, tc.status, tc.code, tc.message)
		}
	}
	// A principal with no assignment on another subscription.
	status, code, _ := armRequest(t, c, http.MethodGet, srv.URL()+"/subscriptions/00000000-0000-0000-0000-0000000000ff/resourcegroups/rg1?api-version=2021-04-01", "Bearer "+good)
	if status != 403 || code != "AuthorizationFailed" {
		t.Errorf("another subscription: %d %s", status, code)
	}
}

// TestEntraTokensThroughAzidentity: the real azidentity client-secret
// credential gets a token from the emulator's Entra ID that ARM accepts; a
// wrong secret is refused with Entra's AADSTS7000215.
func TestEntraTokensThroughAzidentity(t *testing.T) {
	dir, srv, login, c := authWorld(t)
	p, secret, err := dir.CreateServicePrincipal(authTenant, "contributor")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.AssignRole(p.ObjectID, "Contributor", "/subscriptions/"+sub); err != nil {
		t.Fatal(err)
	}
	cfg := endpoint.Config{ResourceManagerEndpoint: srv.URL(), AuthorityHost: login.URL(), Transport: c}
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	newCred := func(secret string) azcore.TokenCredential {
		cred, err := azidentity.NewClientSecretCredential(authTenant, p.ClientID, secret, &azidentity.ClientSecretCredentialOptions{
			ClientOptions: azcore.ClientOptions{Cloud: azurecloud.Configuration{ActiveDirectoryAuthorityHost: login.URL()}, Transport: c}, DisableInstanceDiscovery: true})
		if err != nil {
			t.Fatal(err)
		}
		return cred
	}
	groups, _ := armresources.NewResourceGroupsClient(sub, newCred(secret), opts)
	if _, err := groups.CreateOrUpdate(context.Background(), "made-by-sp", armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatalf("a Contributor could not create a resource group: %v", err)
	}
	bad, _ := armresources.NewResourceGroupsClient(sub, newCred("wrong"), opts)
	_, err = bad.Get(context.Background(), "made-by-sp", nil)
	var af *azidentity.AuthenticationFailedError
	if !errors.As(err, &af) || !strings.Contains(err.Error(), "AADSTS7000215") {
		t.Fatalf("a wrong secret: %v", err)
	}
	if dir.TokenFailuresFor(p.ClientID) == 0 || dir.TokenRequestsFor(p.ClientID) < 2 {
		t.Fatalf("token requests %d, failures %d", dir.TokenRequestsFor(p.ClientID), dir.TokenFailuresFor(p.ClientID))
	}
}

// ARM remembers a token it verified (the same token comes with every
// request of a caller), yet once the token expires it is refused as Azure
// refuses any expired token.
func TestARMRefusesAnAcceptedTokenOnceItExpires(t *testing.T) {
	t.Parallel() // it waits seconds for the token to expire, alone in its world
	dir, srv, _, c := authWorld(t)
	p, _, err := dir.CreateServicePrincipal(authTenant, "short-lived")
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.AssignRole(p.ObjectID, "Reader", "/subscriptions/"+sub); err != nil {
		t.Fatal(err)
	}
	rg := srv.URL() + "/subscriptions/" + sub + "/resourcegroups/rg1?api-version=2021-04-01"
	// JWT expiries have whole seconds: two seconds from now is at least one.
	tok, err := dir.IssueTokenForTest(p, srv.URL(), time.Now().Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if status, code, msg := armRequest(t, c, http.MethodGet, rg, "Bearer "+tok); status != 404 || code != "ResourceGroupNotFound" {
			t.Fatalf("a valid token: %d %s %s", status, code, msg)
		}
	}
	poll.Until(t, 10*time.Second, func() string {
		status, code, msg := armRequest(t, c, http.MethodGet, rg, "Bearer "+tok)
		if status == 404 {
			return "the token is still accepted"
		}
		if status != 401 || code != "ExpiredAuthenticationToken" || !strings.Contains(msg, "is earlier than current UTC time") {
			t.Fatalf("the expired token: %d %s %q, want 401 ExpiredAuthenticationToken", status, code, msg)
		}
		return ""
	})
}
