package arm

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Boot diagnostics: POST .../retrieveBootDiagnosticsData answers with SAS
// URLs of the machine's console screenshot and serial log
// (RetrieveBootDiagnosticsDataResult; example VirtualMachine_
// RetrieveBootDiagnosticsData.json in azure-rest-api-specs ComputeRP/
// stable/2025-04-01 @f2a212d2). With boot diagnostics on Azure's managed
// storage (CAPZ's and winkube's choice: no storageUri) the instance view
// carries no blob URIs and this action is the only way to them
// (Azure/azure-cli#14539; BootDiagnosticsInstanceView in armcompute
// v7.3.0 models.go). The URLs are the emulator's own, on its listener, signed
// and expiring as asked, so that nothing else reads a machine's console.

const blobPrefix = "/bootdiagnostics/"

// The SAS lifetime the specification allows, and its default
// (sasUriExpirationTimeInMinutes in armcompute v7.3.0 options.go).
const (
	sasDefaultMinutes = 120
	sasMaxMinutes     = 1440
)

func isBlobPath(p string) bool { return strings.HasPrefix(p, blobPrefix) }

func newBlobKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// bootDiagnosticsOn reports whether a VM, or an instance through its own
// model or its scale set's, has boot diagnostics enabled.
func (s *Server) bootDiagnosticsOn(r *resource) bool {
	if v, ok := get(r.props(), "diagnosticsProfile", "bootDiagnostics", "enabled").(bool); ok || r.kind.typ == kindVM {
		return v
	}
	parent, _ := r.id.Parent()
	vmss := s.lookup(parent.String())
	if vmss == nil {
		return false
	}
	v, _ := get(vmss.props(), "virtualMachineProfile", "diagnosticsProfile", "bootDiagnostics", "enabled").(bool)
	return v
}

// serveBootDiagnostics answers retrieveBootDiagnosticsData. Without boot
// diagnostics Azure answers 409 (canonical/pycloudlib pycloudlib/azure/
// instance.py treats ResourceExistsError, azure-core's 409, as "not
// enabled"); the code and message are the emulator's, as no public source
// quotes Azure's.
func (s *Server) serveBootDiagnostics(w http.ResponseWriter, r *http.Request, res *resource) {
	unlock := func() {}
	defer func() { unlock() }()
	minutes := sasDefaultMinutes
	if v := r.URL.Query().Get("sasUriExpirationTimeInMinutes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > sasMaxMinutes {
			writeError(w, invalidParameter("sasUriExpirationTimeInMinutes", "The value %s of sasUriExpirationTimeInMinutes is not valid: it must be between 1 and %d minutes.", v, sasMaxMinutes))
			return
		}
		minutes = n
	}
	unlock = s.lock()
	on := s.bootDiagnosticsOn(res)
	vmID := str(res.props(), "vmId")
	now := s.now()
	unlock()
	if !on {
		writeError(w, errorf(http.StatusConflict, "OperationNotAllowed", "Boot diagnostics is not enabled for virtual machine '%s': set diagnosticsProfile.bootDiagnostics.enabled.", res.id.Name()))
		return
	}
	expiry := now.Add(time.Duration(minutes) * time.Minute).UTC()
	base := "https://" + r.Host + blobPrefix + vmID + "/" + res.id.Name()
	writeJSON(w, http.StatusOK, map[string]any{
		"consoleScreenshotBlobUri": s.signBlob(base+".screenshot.bmp", expiry),
		"serialConsoleLogBlobUri":  s.signBlob(base+".serialconsole.log", expiry),
	})
}

// signBlob makes a SAS-like URL: read-only, expiring, signed with the
// emulator's key over the path and the expiry.
func (s *Server) signBlob(url string, expiry time.Time) string {
	path := url[strings.Index(url, blobPrefix):]
	se := expiry.Format(time.RFC3339)
	return url + "?sp=r&sr=b&se=" + se + "&sig=" + s.blobSignature(path, se)
}

func (s *Server) blobSignature(path, se string) string {
	m := hmac.New(sha256.New, s.blobKey)
	m.Write([]byte(path + "\n" + se))
	return hex.EncodeToString(m.Sum(nil))
}

// storageError is Azure Storage's error body, XML.
type storageError struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
	Detail  string   `xml:"AuthenticationErrorDetail,omitempty"`
}

func writeStorageError(w http.ResponseWriter, status int, e storageError) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(e)
}

// serveBlob answers a GET of a boot diagnostics URL as Azure Storage
// answers a SAS request: 403 AuthenticationFailed for a bad signature or
// an expired one (its detail "Signature not valid in the specified time
// frame", as Azure Storage words it), 404 BlobNotFound for what does not
// exist.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request) {
	unlock := func() {}
	defer func() { unlock() }()
	q := r.URL.Query()
	se := q.Get("se")
	const authFailed = "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature."
	if !hmac.Equal([]byte(q.Get("sig")), []byte(s.blobSignature(r.URL.Path, se))) || q.Get("sp") != "r" {
		writeStorageError(w, http.StatusForbidden, storageError{Code: "AuthenticationFailed", Message: authFailed, Detail: "Signature did not match."})
		return
	}
	expiry, err := time.Parse(time.RFC3339, se)
	unlock = s.lock()
	now := s.now().UTC()
	unlock()
	if err != nil || now.After(expiry) {
		writeStorageError(w, http.StatusForbidden, storageError{Code: "AuthenticationFailed", Message: authFailed,
			Detail: "Signature not valid in the specified time frame: Expiry [" + expiry.Format(http.TimeFormat) + "] - Current [" + now.Format(http.TimeFormat) + "]"})
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStorageError(w, http.StatusForbidden, storageError{Code: "AuthorizationPermissionMismatch", Message: "This request is not authorized to perform this operation using this permission."})
		return
	}
	vmID, file, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, blobPrefix), "/")
	unlock = s.lock()
	var machine string
	for _, res := range s.resources {
		if (res.kind.typ == kindVM || res.kind.typ == kindInstance) && str(res.props(), "vmId") == vmID && !res.deleting {
			machine = res.idStr
		}
	}
	unlock()
	notFound := storageError{Code: "BlobNotFound", Message: "The specified blob does not exist."}
	agent, ok := s.opts.Runtime.(GuestAgent)
	// The emulated machines have no screen to take a picture of: the
	// screenshot's URL is handed out, as Azure does, but holds nothing.
	if machine == "" || !ok || !strings.HasSuffix(file, ".serialconsole.log") {
		writeStorageError(w, http.StatusNotFound, notFound)
		return
	}
	log, err := agent.SerialConsole(context.Background(), machine)
	if err != nil {
		notFound.Message += " " + err.Error()
		writeStorageError(w, http.StatusNotFound, notFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("x-ms-blob-type", "AppendBlob")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(log)
	}
}
