package arm

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Instance Metadata Service's managed-identity endpoint, as a VM sees
// it at http://169.254.169.254/metadata/identity/oauth2/token (Microsoft
// Learn, "How to use managed identities for Azure resources on an Azure VM
// to acquire an access token"): a GET with the header Metadata: true,
// api-version, resource (the audience) and optionally one of client_id,
// object_id or msi_res_id naming the identity. It answers with a token
// Entra issued for an identity attached to that VM (or to the scale set of
// that instance), and refuses any other.
//
// What differs from Azure is the address. On Azure every VM reaches IMDS
// at the same link-local address and the platform tells VMs apart by where
// the request comes from. Emulated machines are processes on one host: they
// cannot bind 169.254.169.254, and their requests all come from loopback.
// So the emulator serves IMDS over plain HTTP (as Azure does) on a
// listener of its own, and gives each machine its own base URL
// (Machine.IMDS) with an unguessable path: holding that URL is what being
// on the VM means. A client library takes it where it takes an IMDS
// override (azidentity: AZURE_POD_IDENTITY_AUTHORITY_HOST), and appends
// /metadata/identity/oauth2/token.

type imdsServer struct {
	mu       sync.Mutex
	base     string            // http://host:port
	machines map[string]string // path token -> machine ID
	tokens   map[string]string // lower-case machine ID -> path token
	listener net.Listener
	http     *http.Server
}

// startIMDS listens for IMDS requests on host; it serves only with a
// directory, which signs the tokens.
func (s *Server) startIMDS(host string) error {
	if s.opts.Directory == nil {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return err
	}
	s.imds = &imdsServer{base: "http://" + ln.Addr().String(), machines: map[string]string{}, tokens: map[string]string{}, listener: ln}
	s.imds.http = &http.Server{Handler: http.HandlerFunc(s.serveIMDS), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.imds.http.Serve(ln)
	}()
	return nil
}

// imdsURL is a machine's IMDS base URL, made the first time it is asked.
func (s *Server) imdsURL(machineID string) string {
	if s.imds == nil {
		return ""
	}
	m := s.imds
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tokens[key(machineID)]
	if !ok {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		t = hex.EncodeToString(b)
		m.tokens[key(machineID)], m.machines[t] = t, machineID
	}
	return m.base + "/" + t
}

const imdsTokenPath = "/metadata/identity/oauth2/token"

// imdsError is IMDS's error body: an OAuth error and its description.
func imdsError(w http.ResponseWriter, status int, code, description string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}

func (s *Server) serveIMDS(w http.ResponseWriter, r *http.Request) {
	token, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.imds.mu.Lock()
	machineID, known := s.imds.machines[token]
	s.imds.mu.Unlock()
	if !known || "/"+rest != imdsTokenPath {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// Learn's error table: 400 bad_request_102 "Required metadata header
	// not specified" when Metadata: true is missing.
	if !strings.EqualFold(r.Header.Get("Metadata"), "true") {
		imdsError(w, http.StatusBadRequest, "invalid_request", "Required metadata header not specified")
		return
	}
	q := r.URL.Query()
	if q.Get("api-version") == "" {
		imdsError(w, http.StatusBadRequest, "invalid_request", "Required query variable 'api-version' is missing")
		return
	}
	resource := q.Get("resource")
	if resource == "" {
		imdsError(w, http.StatusBadRequest, "invalid_request", "Required query variable 'resource' is missing")
		return
	}
	ids := func() []machineIdentity {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.identitiesOf(machineID)
	}()
	clientID, objectID, resID := q.Get("client_id"), q.Get("object_id"), q.Get("msi_res_id")
	if resID == "" {
		resID = q.Get("mi_res_id")
	}
	var chosen *machineIdentity
	switch {
	case clientID != "" || objectID != "" || resID != "":
		for i, id := range ids {
			if (clientID != "" && strings.EqualFold(clientID, id.clientID)) || (objectID != "" && strings.EqualFold(objectID, id.objectID)) ||
				(resID != "" && id.resourceID != "" && strings.EqualFold(resID, id.resourceID)) {
				chosen = &ids[i]
				break
			}
		}
	case len(ids) > 0 && ids[0].system, len(ids) == 1:
		chosen = &ids[0]
	case len(ids) > 1:
		// Several user-assigned identities and no selector: IMDS's answer
		// as Hexadite/acs-keyvault-agent#43 quotes it.
		imdsError(w, http.StatusBadRequest, "invalid_request", "Multiple user assigned identities exist, please specify the clientId / resourceId of the identity in the token request")
		return
	}
	if chosen == nil {
		// {"error":"invalid_request","error_description":"Identity not
		// found"} (Azure/azure-sdk-for-net#37278, Azure/aad-pod-identity#1085).
		imdsError(w, http.StatusBadRequest, "invalid_request", "Identity not found")
		return
	}
	tok, exp, err := s.opts.Directory.IssueManagedIdentityToken(chosen.clientID, resource)
	if err != nil {
		imdsError(w, http.StatusBadRequest, "invalid_request", "Identity not found")
		return
	}
	now := time.Now()
	// The 2018-02-01 answer: every value a string (Learn's sample response).
	writeJSON(w, http.StatusOK, map[string]string{
		"access_token": tok, "client_id": chosen.clientID, "resource": resource, "token_type": "Bearer",
		"expires_in": strconv.Itoa(int(exp.Sub(now).Seconds())), "ext_expires_in": strconv.Itoa(int(exp.Sub(now).Seconds())),
		"expires_on": strconv.FormatInt(exp.Unix(), 10), "not_before": strconv.FormatInt(now.Add(-5*time.Minute).Unix(), 10),
	})
}
