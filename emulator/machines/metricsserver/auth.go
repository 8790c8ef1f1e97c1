package metricsserver

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// RequestHeader is the API server's front-proxy configuration: a client
// certificate from ClientCA with a common name in AllowedNames (any when
// empty) may name the user in the headers.
type RequestHeader struct {
	ClientCA            *x509.CertPool
	AllowedNames        []string
	UsernameHeaders     []string
	GroupHeaders        []string
	ExtraHeaderPrefixes []string
}

// readRequestHeader reads what the kube-apiserver publishes of its
// --requestheader-* flags: the keys its cluster authentication trust
// controller writes (pkg/controlplane/controller/clusterauthenticationtrust,
// k8s.io/kubernetes v1.36.3), lists as JSON arrays.
func readRequestHeader(ctx context.Context, c kubernetes.Interface) (*RequestHeader, error) {
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		// The generic API server's message (k8s.io/apiserver v0.36.3
		// pkg/server/options/authentication.go).
		return nil, fmt.Errorf("unable to load configmap based request-header-client-ca-file: %w", err)
	}
	return RequestHeaderFrom(cm.Data)
}

// RequestHeaderFrom parses the extension-apiserver-authentication data.
func RequestHeaderFrom(data map[string]string) (*RequestHeader, error) {
	h := &RequestHeader{ClientCA: x509.NewCertPool()}
	ca := data["requestheader-client-ca-file"]
	if ca == "" {
		return nil, fmt.Errorf("kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: the API server runs without --requestheader-client-ca-file, so no aggregator can authenticate to metrics-server")
	}
	if !h.ClientCA.AppendCertsFromPEM([]byte(ca)) {
		return nil, fmt.Errorf("requestheader-client-ca-file of kube-system/extension-apiserver-authentication holds no PEM certificate")
	}
	for key, into := range map[string]*[]string{
		"requestheader-allowed-names":        &h.AllowedNames,
		"requestheader-username-headers":     &h.UsernameHeaders,
		"requestheader-group-headers":        &h.GroupHeaders,
		"requestheader-extra-headers-prefix": &h.ExtraHeaderPrefixes,
	} {
		if v := data[key]; v != "" {
			if err := json.Unmarshal([]byte(v), into); err != nil {
				return nil, fmt.Errorf("%s of kube-system/extension-apiserver-authentication is not a JSON list of strings: %w", key, err)
			}
		}
	}
	return h, nil
}

type user struct {
	name   string
	groups []string
	extra  map[string]authorizationv1.ExtraValue
}

// authenticate is the delegating authenticator of a generic API server,
// as metrics-server runs it: a front-proxy client certificate naming the
// user in headers, else a bearer token the API server reviews
// (TokenReview), else anonymous. ok is false for credentials that do not
// hold, which is answered 401.
func (s *Server) authenticate(r *http.Request) (user, bool) {
	s.mu.Lock()
	h := s.header
	s.mu.Unlock()
	if h != nil && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		certs := r.TLS.PeerCertificates
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: h.ClientCA, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err == nil {
			if len(h.AllowedNames) > 0 && !slices.Contains(h.AllowedNames, certs[0].Subject.CommonName) {
				return user{}, false
			}
			if u, ok := fromHeaders(r.Header, h); ok {
				return u, true
			}
		}
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
		tr, err := s.client.AuthenticationV1().TokenReviews().Create(r.Context(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil || !tr.Status.Authenticated {
			return user{}, false
		}
		u := user{name: tr.Status.User.Username, groups: tr.Status.User.Groups, extra: map[string]authorizationv1.ExtraValue{}}
		for k, v := range tr.Status.User.Extra {
			u.extra[k] = authorizationv1.ExtraValue(v)
		}
		return u, true
	}
	return user{name: "system:anonymous", groups: []string{"system:unauthenticated"}}, true
}

func fromHeaders(hdr http.Header, h *RequestHeader) (user, bool) {
	var u user
	for _, n := range h.UsernameHeaders {
		if v := hdr.Get(n); v != "" {
			u.name = v
			break
		}
	}
	if u.name == "" {
		return u, false
	}
	for _, g := range h.GroupHeaders {
		u.groups = append(u.groups, hdr.Values(g)...)
	}
	for k, vs := range hdr {
		for _, p := range h.ExtraHeaderPrefixes {
			if len(k) > len(p) && strings.EqualFold(k[:len(p)], p) {
				if u.extra == nil {
					u.extra = map[string]authorizationv1.ExtraValue{}
				}
				key := strings.ToLower(k[len(p):])
				u.extra[key] = append(u.extra[key], vs...)
			}
		}
	}
	return u, true
}

// request is what a request asks, as the authorizer sees it.
type request struct {
	verb, namespace, resource, name, path string
}

// authorized authenticates every request and asks the API server whether
// the user may make it (SubjectAccessReview), as the generic API server's
// delegating authorizer does; /healthz, /readyz and /livez need neither
// (DelegatingAuthorizationOptions' AlwaysAllowPaths, k8s.io/apiserver
// v0.36.3 pkg/server/options/authorization.go).
func (s *Server) authorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := s.authenticate(r)
		if !ok {
			writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		req := describe(r)
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: u.name, Groups: u.groups, Extra: u.extra}}
		if req.resource == "" {
			sar.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: req.path, Verb: req.verb}
		} else {
			sar.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Verb: req.verb, Group: group, Version: "v1beta1", Resource: req.resource, Namespace: req.namespace, Name: req.name}
		}
		res, err := s.client.AuthorizationV1().SubjectAccessReviews().Create(r.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			writeStatus(w, apierrors.NewInternalError(err))
			return
		}
		if !res.Status.Allowed {
			writeStatus(w, forbidden(u, req, res.Status.Reason))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// describe reads the verb and resource of a request of the metrics API.
func describe(r *http.Request) request {
	req := request{verb: "get", path: r.URL.Path}
	rest, ok := strings.CutPrefix(r.URL.Path, "/apis/"+groupVersion+"/")
	if !ok {
		return req
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if len(parts) >= 2 && parts[0] == "namespaces" {
		req.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) > 0 {
		req.resource = parts[0]
	}
	if len(parts) > 1 {
		req.name = parts[1]
	} else {
		req.verb = "list"
	}
	return req
}

// forbidden is the generic API server's answer (endpoints/handlers/
// responsewriters/errors.go forbiddenMessage, k8s.io/apiserver v0.36.3).
func forbidden(u user, req request, reason string) error {
	var msg string
	switch {
	case req.resource == "":
		msg = fmt.Sprintf("User %q cannot %s path %q", u.name, req.verb, req.path)
	case req.namespace != "":
		msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", u.name, req.verb, req.resource, group, req.namespace)
	default:
		msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", u.name, req.verb, req.resource, group)
	}
	if reason != "" {
		msg += ": " + reason
	}
	gr := schema.GroupResource{}
	if req.resource != "" {
		gr = schema.GroupResource{Group: group, Resource: req.resource}
	}
	return apierrors.NewForbidden(gr, req.name, fmt.Errorf("%s", msg))
}
