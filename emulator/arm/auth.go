package arm

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/winkube/winkube/emulator/entra"
)

// ServerCertificate issues a TLS certificate for host from the emulator's
// CA, so that its Entra ID is trusted by the same clients.
func (s *Server) ServerCertificate(host string) (tls.Certificate, error) {
	return s.ca.serverCert(host)
}

// caller is who a request acts as.
type caller struct {
	entra.Caller
	static bool
}

// authenticate checks the request's bearer token as ARM does: a token Entra
// ID issued for this endpoint that has not expired. Without a directory the
// emulator accepts only its static token (tests that are not about
// identity use that).
func (s *Server) authenticate(r *http.Request) (caller, *armError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return caller{}, errorf(http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
	}
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || token == "" {
		return caller{}, errorf(http.StatusUnauthorized, "AuthenticationFailedInvalidHeader", "Authentication failed. The 'Authorization' header is provided in an invalid format.")
	}
	if s.opts.Directory == nil {
		if token != s.opts.Token {
			return caller{}, errorf(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid.")
		}
		return caller{static: true}, nil
	}
	c, err := s.opts.Directory.Authenticate(token, []string{s.URL()})
	var te *entra.TokenError
	if errors.As(err, &te) {
		switch te.Reason {
		case entra.TokenExpired:
			const layout = "1/2/2006 3:04:05 PM"
			return caller{}, errorf(http.StatusUnauthorized, "ExpiredAuthenticationToken", "The access token expiry UTC time '%s' is earlier than current UTC time '%s'.",
				te.Expired.UTC().Format(layout), time.Now().UTC().Format(layout))
		case entra.TokenWrongAudience:
			return caller{}, errorf(http.StatusUnauthorized, "InvalidAuthenticationTokenAudience", "The access token has been obtained for wrong audience or resource '%s'. It should exactly match with one of the allowed audiences '%s/','%s'.",
				te.Audience, s.URL(), s.URL())
		}
	}
	if err != nil {
		return caller{}, errorf(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid.")
	}
	if want := s.opts.TenantID; want != "" && !strings.EqualFold(c.TenantID, want) {
		return caller{}, wrongTenant(c, want)
	}
	return caller{Caller: c}, nil
}

// wrongTenant is ARM's answer to a token from a tenant the subscription is
// not in: 401 InvalidAuthenticationTokenTenant, naming the token's issuer,
// the subscription's tenant and the authority to get a token from, as
// Azure words it (quoted in Azure/BatchExplorer#2052 and
// Azure/azure-sdk-for-net#49391), with the WWW-Authenticate challenge whose
// authorization_uri names that authority (the challenge clients such as
// `az` read to discover a subscription's tenant). The authority is the
// one that issued the token, with the subscription's tenant.
func wrongTenant(c entra.Caller, tenant string) *armError {
	authority := strings.TrimSuffix(strings.TrimSuffix(c.Issuer, "/"), c.TenantID)
	authority = strings.TrimSuffix(authority, "/") + "/" + tenant
	e := errorf(http.StatusUnauthorized, "InvalidAuthenticationTokenTenant",
		"The access token is from the wrong issuer '%s'. It must match the tenant '%s' associated with this subscription. Please use the authority (URL) '%s' to get the token.",
		c.Issuer, authority+"/", authority)
	e.Challenge = `Bearer authorization_uri="` + authority + `", error="invalid_token", error_description="The access token is from the wrong issuer."`
	return e
}

// authorizeControl lets only the emulator's operators use its control API:
// the static token of tests, or a principal listed in Operators. Azure has
// no such API; its faults act on every subscription, so no role
// assignment, however broad, grants it.
func (s *Server) authorizeControl(c caller) *armError {
	if c.static {
		return nil
	}
	for _, id := range s.opts.Operators {
		if strings.EqualFold(id, c.ObjectID) {
			return nil
		}
	}
	return errorf(http.StatusForbidden, "AuthorizationFailed", "The client '%s' with object id '%s' is not an operator of this emulator: its control API (/emulator/) answers only the principals it was started with as operators (winkube emulator --operator; a local world's own service principal).",
		c.ObjectID, c.ObjectID)
}

type callerKey struct{}

func withCaller(r *http.Request, c caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
}

// callerOf is who the request acts as.
func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// authorize checks Azure RBAC: the caller needs a role assignment at the
// request's scope, or above it, that permits the request's action.
func (s *Server) authorize(c caller, r *http.Request) *armError {
	unlock := func() {}
	defer func() { unlock() }()
	if c.static {
		return nil
	}
	scope := strings.TrimRight(r.URL.Path, "/")
	action := requestAction(r.Method, scope)
	if isOperationURL(scope) {
		// The status URLs a write returns are subscription-level
		// (/subscriptions/S/providers/NS/locations/L/operations/ID), and
		// principals whose roles are on one resource group poll them: the
		// CAPZ manager and cloud-provider-azure, each scoped to its
		// cluster's group, do on every write. They are checked as reads
		// of the resource the operation acts on.
		unlock = s.lock()
		op := s.ops[scope[strings.LastIndex(scope, "/")+1:]]
		unlock()
		if op == nil || op.scope == "" {
			return nil // unknown: OperationNotFound says so
		}
		scope, action = op.scope, requestAction(http.MethodGet, op.scope)
	}
	if s.opts.Directory.Authorized(c.ObjectID, action, scope) {
		return nil
	}
	return errorf(http.StatusForbidden, "AuthorizationFailed", "The client '%s' with object id '%s' does not have authorization to perform action '%s' over scope '%s' or the scope is invalid. If access was recently granted, please refresh your credentials.",
		c.ObjectID, c.ObjectID, action, scope)
}

// requestAction is the Azure RBAC action a request performs, such as
// Microsoft.Network/virtualNetworks/subnets/write or
// Microsoft.Resources/subscriptions/resourceGroups/read.
func requestAction(method, path string) string {
	verb := map[string]string{http.MethodGet: "read", http.MethodHead: "read", http.MethodPut: "write", http.MethodPatch: "write", http.MethodDelete: "delete", http.MethodPost: "action"}[method]
	if verb == "" {
		verb = "read"
	}
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var ns string
	var types []string
	// The last provider names the action: a role assignment on a VM,
	// .../virtualMachines/vm/providers/Microsoft.Authorization/
	// roleAssignments/x, is Microsoft.Authorization/roleAssignments/write.
	for i := len(seg) - 1; i >= 0; i-- {
		if strings.EqualFold(seg[i], "providers") && i+1 < len(seg) {
			ns = seg[i+1]
			types = nil
			for j := i + 2; j < len(seg); j += 2 {
				types = append(types, seg[j])
			}
			break
		}
	}
	if ns == "" {
		// /subscriptions/S[/resourceGroups[/G]]
		ns = "Microsoft.Resources"
		types = []string{"subscriptions"}
		if len(seg) >= 3 {
			types = append(types, "resourceGroups")
		}
	}
	if verb == "action" && len(types) > 0 {
		// POST .../virtualMachines/vm/start: the last segment names the action.
		return ns + "/" + strings.Join(types, "/") + "/action"
	}
	return ns + "/" + strings.Join(types, "/") + "/" + verb
}
