// Package arm is an emulator of the parts of Azure Resource Manager that
// winkube's provider uses: resource groups, networking (VNets, subnets, NSGs,
// route tables, NAT gateways, public IPs, load balancers, NICs) and compute
// (VMs, disks, scale sets, the VM image catalog, resource SKUs). It speaks ARM
// REST over HTTPS so that the real Azure SDK for Go talks to it exactly as it
// talks to Azure, including long-running operations, ETags, throttling and
// Azure's validation errors. When a VM finishes provisioning it is handed to
// a MachineRuntime, which boots it.
package arm

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/winkube/winkube/emulator/entra"
)

// Options configure an emulator.
type Options struct {
	// Directory is the Entra ID whose tokens ARM accepts and whose role
	// assignments it enforces.
	Directory *entra.Directory
	// Token is, without a Directory, the one bearer token accepted (tests
	// that are not about identity). It is the operator's credential: it may
	// use the control API.
	Token string
	// TenantID is the tenant every subscription the emulator serves belongs
	// to: a token another tenant issued is refused as ARM refuses it (401
	// InvalidAuthenticationTokenTenant). Empty accepts every tenant's
	// tokens.
	TenantID string
	// Operators are the object IDs of the principals that may use the
	// emulator's control API (/emulator/...: faults, counters), which acts
	// on every subscription. No one else may, whatever their roles: a VM's
	// managed identity or a cluster's identity must not inject faults.
	Operators []string
	// OperationDelay is how long a long-running operation takes.
	OperationDelay time.Duration
	// BootDelayLinux and BootDelayWindows are added to a VM's provisioning,
	// as Windows boots take longer on Azure.
	BootDelayLinux, BootDelayWindows time.Duration
	// PollInterval is the Retry-After the emulator asks pollers to wait.
	PollInterval time.Duration
	// Throttle is the per-subscription request budget; zero means unlimited.
	Throttle Throttle
	// Faults are injected into matching requests.
	Faults []Fault
	// ProvisioningFailures fail the provisioning of matching VMs.
	ProvisioningFailures []ProvisioningFailure
	// SKURestrictions are the sizes this subscription may not deploy in
	// some locations or zones, as real subscriptions have them.
	SKURestrictions []SKURestriction
	// Seed makes fault injection repeatable.
	Seed int64
	// Runtime boots provisioned machines; nil means none.
	Runtime MachineRuntime
	// Catalog is the VM image catalog; DefaultCatalog when nil.
	Catalog *Catalog
	// PublicIPPool is where public IPs come from; 127.1.0.0/16 when unset.
	PublicIPPool netip.Prefix
	// PublicIPStart is the pool's address where handing out starts (the
	// next free one from there, wrapping around the pool); the pool's
	// first when unset. A local world starts each new world elsewhere, so
	// that its API server is not at an address a client cached for an
	// earlier one.
	PublicIPStart netip.Addr
	// OnChange, when set, is called after what Save writes may have
	// changed (a write request was served, an operation moved on), without
	// the emulator's lock held. It must return at once: a caller that keeps
	// the state on disk as it changes marks it dirty and saves later,
	// coalescing the calls.
	OnChange func()
}

// Server is a running emulator.
type Server struct {
	opts Options

	mu sync.Mutex
	// catalogMu guards the marketplace catalog, which PublishImage extends
	// while the emulator serves.
	catalogMu sync.RWMutex
	// saveMu orders Saves, so that an older snapshot never replaces a
	// newer one on disk.
	saveMu    sync.Mutex
	groups    map[string]*resource // key: lower-case RG ID
	resources map[string]*resource // key: lower-case resource ID
	ops       map[string]*operation
	timers    map[*time.Timer]struct{}
	counters  map[string]int64
	buckets   map[string]*bucket
	rng       *rand.Rand
	closed    bool
	// stopLater collects machines that hooks removed under the lock; they
	// are stopped once it is released.
	stopLater []string
	// listeners are told of changes to the network's data plane
	// (loadbalancer.go).
	listeners  []func()
	netChanged chan struct{}
	netDone    chan struct{}
	// agentBusy are the machines (by lower-case ID) whose VM agent runs
	// an action Run Command (runcommand.go).
	agentBusy map[string]bool
	// blobKey signs the boot diagnostics' SAS URLs (bootdiagnostics.go);
	// now is the clock their expiry is checked against.
	blobKey []byte
	now     func() time.Time
	// newerVersions are the api-versions, by resource provider, that were
	// served as an older one and logged (apiversions.go).
	newerVersions map[string]bool
	// loginEndpoint is the Entra ID authority host the metadata document
	// names (metadata.go).
	loginEndpoint string

	ca       *certAuthority
	imds     *imdsServer
	listener net.Listener
	http     *http.Server
	// serving counts the requests being answered: Close waits for them,
	// not for idle connections (see Close).
	serving atomic.Int64
	wg      sync.WaitGroup
}

// New creates an emulator; Start serves it.
func New(opts Options) (*Server, error) {
	if opts.Token == "" && opts.Directory == nil {
		return nil, errors.New("arm: an Entra ID directory (or, in tests, a static token) is required")
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 50 * time.Millisecond
	}
	if opts.Catalog == nil {
		opts.Catalog = DefaultCatalog()
	}
	if !opts.PublicIPPool.IsValid() {
		opts.PublicIPPool = netip.MustParsePrefix("127.1.0.0/16")
	}
	ca, err := newCertAuthority()
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:      opts,
		groups:    map[string]*resource{},
		resources: map[string]*resource{},
		ops:       map[string]*operation{},
		timers:    map[*time.Timer]struct{}{},
		counters:  map[string]int64{},
		buckets:   map[string]*bucket{},
		rng:       rand.New(rand.NewSource(opts.Seed)), //nolint:gosec // fault injection, not security
		ca:        ca,
		agentBusy: map[string]bool{},
		blobKey:   newBlobKey(),
		now:       time.Now,

		newerVersions: map[string]bool{},
	}
	s.attachDataPlane()
	return s, nil
}

// Start listens on addr (host:port, port 0 for any) and serves ARM over TLS.
func (s *Server) Start(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("arm: listen address %q: %w", addr, err)
	}
	cert, err := s.ca.serverCert(host)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("arm: %w", err)
	}
	s.listener = ln
	if err := s.startIMDS(host); err != nil {
		_ = ln.Close()
		return fmt.Errorf("arm: IMDS: %w", err)
	}
	s.http = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.serving.Add(1)
			defer s.serving.Add(-1)
			s.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.http.ServeTLS(ln, "", "")
	}()
	return nil
}

// URL is the ARM endpoint, https://host:port.
func (s *Server) URL() string { return "https://" + s.listener.Addr().String() }

// CACertPEM is the CA certificate that signed the server's certificate.
func (s *Server) CACertPEM() []byte { return s.ca.certPEM }

// Close stops serving, cancels pending operations and stops every machine.
func (s *Server) Close() error {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	s.closed = true
	for t := range s.timers {
		t.Stop()
	}
	var running []string
	for _, r := range s.resources {
		if r.booted {
			running = append(running, r.idStr)
		}
	}
	unlock()
	s.stopNotify()
	s.stopMachines(running)
	var err error
	if s.http != nil {
		// Shutdown stops accepting, lets the requests under way end, and
		// then waits for every HTTP/2 client to hang up after its GOAWAY, up
		// to a second (goAwayTimeout in Go's net/http h2_bundle.go); the
		// SDK's clients, which keep their connections, never do, and every
		// emulator closed with one connected waited out that second. So
		// Close waits for Shutdown only until no request is being answered:
		// Shutdown goes on alone, and each connection's server closes it
		// once its last frames are written and the client had its second.
		// Closing the connections here instead dropped answers still queued
		// for writing, and the SDK's retry then found the port closed.
		shut := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			shut <- s.http.Shutdown(ctx)
		}()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
	wait:
		for {
			select {
			case err = <-shut:
				break wait
			case <-tick.C:
				if s.serving.Load() == 0 {
					break wait
				}
			}
		}
		if s.imds != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.imds.http.Shutdown(ctx)
			cancel()
		}
		s.wg.Wait()
	}
	return err
}

// after runs fn once d has passed, unless the emulator closes first.
func (s *Server) after(d time.Duration, fn func()) {
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		s.mu.Lock()
		_, live := s.timers[t]
		delete(s.timers, t)
		s.mu.Unlock()
		if live {
			fn()
			s.changed()
		}
	})
	s.timers[t] = struct{}{}
}

// ServeHTTP handles one ARM request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer s.recoverHandler(w, r)
	if isBlobPath(r.URL.Path) {
		// A SAS URL carries its own authorization, as Azure Storage's do.
		s.serveBlob(w, r)
		return
	}
	if r.URL.Path == metadataPath {
		// Read before a client has credentials (metadata.go).
		s.serveMetadata(w, r)
		return
	}
	who, e := s.authenticate(r)
	if e != nil {
		writeError(w, e)
		return
	}
	r = withCaller(r, who)
	if strings.HasPrefix(r.URL.Path, "/emulator/") {
		if e := s.authorizeControl(who); e != nil {
			writeError(w, e)
			return
		}
		s.serveControl(w, r)
		return
	}
	sub, kind := requestKind(r.URL.Path)
	s.count(r.Method, kind)
	if e := s.authorize(who, r); e != nil {
		writeError(w, e)
		return
	}
	if r.URL.Query().Get("api-version") == "" {
		writeError(w, errorf(http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests."))
		return
	}
	if !isOperationURL(r.URL.Path) {
		op := matchOperation(r.Method, r.URL.Path)
		if op == nil {
			writeError(w, unservedError(r.Method, r.URL.Path))
			return
		}
		asked := r.URL.Query().Get("api-version")
		served, e := servedAPIVersion(op, asked)
		if e != nil {
			writeError(w, e)
			return
		}
		if served != asked {
			w.Header().Set(ServedAPIVersionHeader, served)
			s.noteNewerAPIVersion(op, asked, served)
		}
		r = withOperation(r, op)
	}
	op := operationOf(r)
	if e := s.throttle(w, sub, r.Method); e != nil {
		writeError(w, e)
		return
	}
	if e := s.injectFault(w, r.Method, kind); e != nil {
		writeError(w, e)
		return
	}
	var body map[string]any
	if r.Method == http.MethodPut || r.Method == http.MethodPatch || r.Method == http.MethodPost {
		if r.ContentLength != 0 {
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
				writeError(w, errorf(http.StatusBadRequest, "InvalidRequestContent", "The request content was invalid and could not be deserialized: %v", err))
				return
			}
		}
	}
	switch {
	case strings.HasPrefix(op.ID, "RoleAssignments_") || strings.HasPrefix(op.ID, "RoleDefinitions_"):
		s.serveAuthorization(w, r, op, body)
	case strings.HasPrefix(op.ID, "Tags_"):
		s.serveTagsAtScope(w, r, body)
	default:
		s.route(w, r, body)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.changed()
	}
}

// recoverHandler answers a request whose handler panicked as ARM answers
// its own failures, 500 InternalServerError with the diagnostic
// information a support request quotes, instead of dropping the
// connection. The store's lock is free by then: every function that holds
// it unlocks it as the panic unwinds (lock, in store.go).
func (s *Server) recoverHandler(w http.ResponseWriter, r *http.Request) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler { //nolint:errorlint // the sentinel net/http panics with, compared as it does
		panic(p)
	}
	// What the caller is not told is the emulator's bug: logged as
	// net/http logs a panic it recovers.
	log.Printf("arm: %s %s panicked: %v\n%s", r.Method, r.URL.Path, p, debug.Stack())
	sub, _ := requestKind(r.URL.Path)
	writeError(w, errorf(http.StatusInternalServerError, "InternalServerError",
		"Encountered internal server error. Diagnostic information: timestamp '%s', subscription id '%s', tracking id '%s', request correlation id '%s'.",
		time.Now().UTC().Format("20060102T150405Z"), sub, newUUID(), newUUID()))
}

func (s *Server) changed() {
	if s.opts.OnChange != nil {
		s.opts.OnChange()
	}
}

// requestKind is the subscription and the resource kind of a path, for
// counters, budgets and faults: "virtualMachines", "resourceGroups",
// "operations".
func requestKind(path string) (sub, kind string) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if len(seg) >= 2 && strings.EqualFold(seg[0], "subscriptions") {
		sub = seg[1]
	}
	switch {
	case len(seg) <= 4 && len(seg) >= 3 && strings.EqualFold(seg[2], "resourceGroups"):
		return sub, "resourceGroups"
	case len(seg) >= 5 && strings.EqualFold(seg[2], "resourceGroups") && strings.EqualFold(seg[4], "resources"):
		return sub, "resources"
	}
	for i := len(seg) - 1; i >= 0; i-- {
		if strings.EqualFold(seg[i], "operations") || strings.EqualFold(seg[i], "operationResults") {
			return sub, "operations"
		}
	}
	if id, ok := parseResourcePath(path); ok {
		// The resource's own kind: a VM's instanceView or a scale set's
		// delete action count against the VM or scale set.
		return sub, id.Types[0] + childSuffix(id)
	}
	if len(seg) >= 6 && strings.EqualFold(seg[2], "providers") {
		if strings.EqualFold(seg[4], "locations") && len(seg) > 6 {
			return sub, seg[6]
		}
		return sub, seg[4]
	}
	return sub, "other"
}

func childSuffix(id resourceID) string {
	if len(id.Names) >= 2 && len(id.Types) >= 2 {
		return "/" + id.Types[1]
	}
	return ""
}

func (s *Server) count(method, kind string) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	s.counters[method+" "+kind]++
	unlock()
}

// Counters returns the requests served so far by "METHOD kind".
func (s *Server) Counters() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.counters))
	for k, v := range s.counters {
		out[k] = v
	}
	return out
}

// ResetCounters zeroes the request counters.
func (s *Server) ResetCounters() {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	s.counters = map[string]int64{}
	unlock()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

func writeError(w http.ResponseWriter, e *armError) {
	if e.Challenge != "" {
		w.Header().Set("WWW-Authenticate", e.Challenge)
	}
	writeJSON(w, e.Status, map[string]any{"error": e})
}

// ResourceIDs lists the IDs of every resource the emulator holds, resource
// groups included, sorted; an empty list means nothing is left.
func (s *Server) ResourceIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.resources))
	for _, r := range s.resources {
		out = append(out, r.idStr)
	}
	sort.Strings(out)
	return out
}
