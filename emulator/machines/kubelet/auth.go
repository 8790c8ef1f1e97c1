package kubelet

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
		allowed, err := k.decisions.allowed(r.Context(), k.cfg.Client, who, verb, sub, k.cfg.NodeName)
		if err != nil {
			http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)", who.name, verb, sub), http.StatusInternalServerError)
			return
		}
		if !allowed {
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

// The kubelet's webhook authorizer keeps the API server's answers: an
// allowed request for five minutes, a refused one for thirty seconds
// (KubeletConfiguration authorization.webhook.cacheAuthorizedTTL and
// cacheUnauthorizedTTL, kubernetes/kubernetes
// pkg/kubelet/apis/config/v1beta1/defaults.go @1c9cf914f2f951313b8e9f7c321f5bd50b5e3d9f).
// Without it every scrape, exec and log request cost a
// SubjectAccessReview: 14 per node in a bring-up.
const (
	authorizedTTL   = 5 * time.Minute
	unauthorizedTTL = 30 * time.Second
)

// decisions are the authorizer's cached answers, by the request's
// attributes.
type decisions struct {
	mu sync.Mutex
	m  map[string]decision
}

type decision struct {
	allowed bool
	until   time.Time
}

// allowed asks the API server whether who may verb the node's
// subresource, unless it answered the same question within its TTL.
func (d *decisions) allowed(ctx context.Context, c kubernetes.Interface, who requester, verb, sub, node string) (bool, error) {
	key := decisionKey(who, verb, sub)
	now := time.Now()
	d.mu.Lock()
	if got, ok := d.m[key]; ok && now.Before(got.until) {
		d.mu.Unlock()
		return got.allowed, nil
	}
	d.mu.Unlock()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: who.name, Groups: who.groups, UID: who.uid, Extra: who.extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Version: "v1", Resource: "nodes", Subresource: sub, Name: node},
	}}
	res, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		// Not kept: the next request asks again.
		return false, err
	}
	ttl := unauthorizedTTL
	if res.Status.Allowed {
		ttl = authorizedTTL
	}
	d.mu.Lock()
	if d.m == nil {
		d.m = map[string]decision{}
	}
	for k, v := range d.m {
		if !now.Before(v.until) {
			delete(d.m, k)
		}
	}
	d.m[key] = decision{allowed: res.Status.Allowed, until: now.Add(ttl)}
	d.mu.Unlock()
	return res.Status.Allowed, nil
}

// decisionKey is everything a SubjectAccessReview of the request names
// but the node, which is the kubelet's own.
func decisionKey(who requester, verb, sub string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q %q %q", who.name, who.uid, verb, sub)
	groups := slices.Clone(who.groups)
	slices.Sort(groups)
	fmt.Fprintf(&b, " %q", groups)
	keys := make([]string, 0, len(who.extra))
	for k := range who.extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %q=%q", k, []string(who.extra[k]))
	}
	return b.String()
}
