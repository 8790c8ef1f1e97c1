package kubelet

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// requester is who a request to the kubelet API comes from.
type requester struct {
	name   string
	groups []string
	uid    string
	extra  map[string]authorizationv1.ExtraValue
}

// authorize wraps the kubelet API in the authentication and authorization
// a kubeadm node's kubelet does (its KubeletConfiguration: anonymous
// disabled, x509 with the cluster CA as clientCAFile, webhook
// authentication and authorization through the API server): a client
// certificate the cluster CA signed names the user (CN) and groups (O),
// as the API server's own kubelet client certificate does; otherwise a
// bearer token is checked with a TokenReview. The user then needs the
// nodes subresource the path maps to, asked with a SubjectAccessReview
// (pkg/kubelet/server/auth.go, k8s.io/kubernetes: stats, metrics, log,
// proxy for everything else, such as exec, port-forward, containerLogs).
// A request with neither credential gets 401, as on a kubelet without
// anonymous access; one the API server does not allow, 403 with the
// kubelet's message (pkg/kubelet/server/server.go, InstallAuthFilter).
func (k *Kubelet) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, ok := k.authenticate(r)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb, sub := requestAttributes(r)
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: who.name, Groups: who.groups, UID: who.uid, Extra: who.extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Version: "v1", Resource: "nodes", Subresource: sub, Name: k.cfg.NodeName},
		}}
		res, err := k.cfg.Client.AuthorizationV1().SubjectAccessReviews().Create(r.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)", who.name, verb, sub), http.StatusInternalServerError)
			return
		}
		if !res.Status.Allowed {
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s)", who.name, verb, sub), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate finds the requester: a verified client certificate first,
// then a bearer token the API server's TokenReview accepts.
func (k *Kubelet) authenticate(r *http.Request) (requester, bool) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		if k.cfg.ClientCA == nil {
			return requester{}, false
		}
		certs := r.TLS.PeerCertificates
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: k.cfg.ClientCA, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			return requester{}, false
		}
		return requester{name: certs[0].Subject.CommonName, groups: certs[0].Subject.Organization}, true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return requester{}, false
	}
	tr, err := k.cfg.Client.AuthenticationV1().TokenReviews().Create(r.Context(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
	if err != nil || !tr.Status.Authenticated {
		return requester{}, false
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for key, v := range u.Extra {
		extra[key] = authorizationv1.ExtraValue(v)
	}
	return requester{name: u.Username, groups: u.Groups, uid: u.UID, extra: extra}, true
}

// requestAttributes are the verb and the nodes subresource a request to
// the kubelet API needs (nodeAuthorizerAttributesGetter in
// pkg/kubelet/server/auth.go).
func requestAttributes(r *http.Request) (verb, subresource string) {
	verb = map[string]string{http.MethodPost: "create", http.MethodGet: "get", http.MethodHead: "get", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[r.Method]
	subresource = "proxy"
	for prefix, sub := range map[string]string{"/stats": "stats", "/metrics": "metrics", "/logs": "log"} {
		if r.URL.Path == prefix || strings.HasPrefix(r.URL.Path, prefix+"/") {
			subresource = sub
		}
	}
	return verb, subresource
}
