package machines

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// imdsCredential is a managed identity's token from the IMDS of the VM a
// process runs on, asked as azidentity's ManagedIdentityCredential asks
// (v1.14.0, which cloud-provider-azure v1.36.5 builds with, and v1.15.0
// alike; managed_identity_client.go and MSAL's apps/managedidentity:
// api-version 2018-02-01, the scope less /.default as the resource,
// client_id or msi_res_id naming a user-assigned identity), and failing
// with its words. It does not retry: the controller manager's clients
// retry 5xx three times (pkg/azclient/utils/options.go), and the
// emulator's IMDS answers none.
//
// azidentity itself cannot serve here: its tokens are cached by MSAL for
// the whole process (microsoft-authentication-library-for-go
// apps/managedidentity, the package-level cacheManager), keyed by the
// identity's client ID or "system assigned" and the resource. A real
// process runs on one VM, so that cache is one VM's; the local world runs
// every VM's cloud controller in one process, where it would hand one VM's
// system-assigned token to another.
type imdsCredential struct {
	// base is the IMDS of the VM the process runs on (arm.Machine.IMDS):
	// where the VM's network takes requests to IMDS's link-local address.
	base string
	// id is azure.json's userAssignedIdentityID: a client ID, or a
	// resource ID when it holds /subscriptions/ (cloud-provider-azure
	// v1.36.5 pkg/azclient/auth_func.go).
	id string

	mu     sync.Mutex
	tokens map[string]azcore.AccessToken // by resource
}

// imdsAPIVersion is the version azidentity asks IMDS for, at imdsAddress.
const (
	imdsAPIVersion = "2018-02-01"
	imdsAddress    = "169.254.169.254"
)

func (c *imdsCredential) GetToken(ctx context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	if len(o.Scopes) != 1 {
		return azcore.AccessToken{}, errors.New(miCredential + ".GetToken() requires exactly one scope")
	}
	resource := strings.TrimSuffix(o.Scopes[0], "/.default")
	c.mu.Lock()
	defer c.mu.Unlock()
	// Refreshed five minutes before it expires, as the SDK's bearer
	// token policy does.
	if t, ok := c.tokens[resource]; ok && time.Until(t.ExpiresOn) > 5*time.Minute {
		return t, nil
	}
	q := url.Values{"api-version": {imdsAPIVersion}, "resource": {resource}}
	if c.id != "" {
		if strings.Contains(strings.ToUpper(c.id), "/SUBSCRIPTIONS/") {
			q.Set("msi_res_id", c.id)
		} else {
			q.Set("client_id", c.id)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+imdsAddress+"/metadata/identity/oauth2/token?"+q.Encode(), nil)
	if err != nil {
		return azcore.AccessToken{}, err
	}
	req.Header.Set("Metadata", "true")
	resp, err := c.send(req)
	if err != nil {
		return azcore.AccessToken{}, fmt.Errorf("%s: %v. %s", miCredential, err, troubleshoot)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusBadRequest && c.id != "":
		return azcore.AccessToken{}, authFailed("the requested identity isn't assigned to this resource", req, resp, body)
	case resp.StatusCode == http.StatusBadRequest:
		msg := miCredential + ": failed to authenticate a system assigned identity"
		if len(body) > 0 {
			msg += ". The endpoint responded with " + string(body)
		}
		return azcore.AccessToken{}, errors.New(msg)
	case resp.StatusCode == http.StatusForbidden && strings.Contains(string(body), "unreachable"):
		return azcore.AccessToken{}, fmt.Errorf("%s: unexpected response %q", miCredential, string(body))
	case resp.StatusCode != http.StatusOK:
		return azcore.AccessToken{}, authFailed("", req, resp, body)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresOn   string `json:"expires_on"`
	}
	if err := json.Unmarshal(body, &tok); err != nil {
		return azcore.AccessToken{}, fmt.Errorf("%s: error parsing the json error: %v. %s", miCredential, err, troubleshoot)
	}
	secs, err := strconv.ParseInt(tok.ExpiresOn, 10, 64)
	if err != nil || tok.AccessToken == "" {
		return azcore.AccessToken{}, fmt.Errorf("%s: expires_in and expires_on are both missing or invalid. %s", miCredential, troubleshoot)
	}
	t := azcore.AccessToken{Token: tok.AccessToken, ExpiresOn: time.Unix(secs, 0)}
	if c.tokens == nil {
		c.tokens = map[string]azcore.AccessToken{}
	}
	c.tokens[resource] = t
	return t, nil
}

// send takes the request, made for IMDS's link-local address as the SDK
// makes it, to this VM's IMDS, as the VM's network does on Azure: the
// emulator gives each machine its own base URL.
func (c *imdsCredential) send(req *http.Request) (*http.Response, error) {
	u, err := url.Parse(c.base + req.URL.Path)
	if err != nil {
		return nil, err
	}
	u.RawQuery = req.URL.RawQuery
	out := req.Clone(req.Context())
	out.URL, out.Host = u, u.Host
	return http.DefaultClient.Do(out)
}

const (
	miCredential = "ManagedIdentityCredential"
	troubleshoot = "To troubleshoot, visit https://aka.ms/azsdk/go/identity/troubleshoot#managed-id"
	dashes       = "--------------------------------------------------------------------------------"
)

// authFailed lays the failure out as azidentity's AuthenticationFailedError
// does (errors.go): the message, the request without its query, the
// status and the indented body between dashed lines, the link.
func authFailed(msg string, req *http.Request, resp *http.Response, body []byte) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s authentication failed. %s\n%s %s://%s%s\n%s\nRESPONSE %d: %s\n%s\n", miCredential, msg,
		req.Method, req.URL.Scheme, req.URL.Host, req.URL.Path, dashes, resp.StatusCode, resp.Status, dashes)
	var indented bytes.Buffer
	switch {
	case len(body) == 0:
		b.WriteString("Response contained no body")
	case json.Indent(&indented, body, "", "  ") == nil:
		b.Write(indented.Bytes())
	default:
		b.Write(body)
	}
	b.WriteString("\n" + dashes + "\n" + troubleshoot)
	return errors.New(b.String())
}
