package arm

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// kindInfo is the behaviour of one resource type. Hooks run with the
// server's lock held.
type kindInfo struct {
	typ string // ARM type, Microsoft.Network/virtualNetworks
	// embedded maps child types that GET shows inside the parent (and a
	// PUT of the parent replaces) to the property that holds them.
	embedded map[string]string
	// readOnly kinds are created by the emulator itself (scale-set instances).
	readOnly bool
	// sync kinds are written and deleted within the request, as their
	// resource provider does (availability sets: neither operation is
	// x-ms-long-running-operation in the Compute spec).
	sync bool
	// topLevel kinds need a location.
	topLevel bool
	// keepsUnsent kinds keep, when a PUT replaces them, what the PUT
	// leaves out (VMs: the Compute RP's PUT, datadisks.go).
	keepsUnsent bool
	// put validates a new (old == nil) or replaced resource and applies its
	// side effects on other resources.
	put func(s *Server, r, old *resource) *armError
	// delay is added to OperationDelay for a PUT.
	delay func(s *Server, r *resource) time.Duration
	// work runs without the server's lock once a PUT's delay has passed,
	// before ready: what the resource provider does inside a machine (a
	// run command's script), which may take as long as the machine does.
	work func(s *Server, r *resource)
	// ready runs when a PUT's operation completes; it may fail it, and
	// returns machines to boot.
	ready func(s *Server, r *resource) ([]Machine, *armError)
	// instanceView is what $expand=instanceView adds to a GET or a list.
	instanceView func(s *Server, r *resource) map[string]any
	// canDelete refuses a DELETE (a NIC still attached to a VM).
	canDelete func(s *Server, r *resource) *armError
	// deleted undoes side effects once the resource is gone and returns the
	// IDs of machines to stop.
	deleted func(s *Server, r *resource) []string
}

var kinds = map[string]*kindInfo{}

func register(k *kindInfo) { kinds[strings.ToLower(k.typ)] = k }

func (s *Server) route(w http.ResponseWriter, r *http.Request, body map[string]any) {
	path := strings.Trim(r.URL.Path, "/")
	seg := strings.Split(path, "/")
	switch {
	case len(seg) < 2 || !strings.EqualFold(seg[0], "subscriptions"):
		writeError(w, errorf(http.StatusNotFound, "NotFound", "No route for %s.", r.URL.Path))
	case len(seg) == 2:
		writeJSON(w, http.StatusOK, map[string]any{"id": "/subscriptions/" + seg[1], "subscriptionId": seg[1], "displayName": "winkube emulator", "state": "Enabled"})
	case strings.EqualFold(seg[2], "resourceGroups") && len(seg) == 3:
		s.listGroups(w, seg[1])
	case strings.EqualFold(seg[2], "resourceGroups") && len(seg) == 4:
		s.serveGroup(w, r, seg[1], seg[3], body)
	case strings.EqualFold(seg[2], "resourceGroups") && len(seg) == 5 && strings.EqualFold(seg[4], "resources"):
		s.listGroupResources(w, seg[1], seg[3])
	case strings.EqualFold(seg[2], "providers"):
		s.serveSubscriptionProvider(w, r, seg)
	default:
		id, ok := parseResourcePath(r.URL.Path)
		if !ok {
			writeError(w, errorf(http.StatusNotFound, "NotFound", "No route for %s.", r.URL.Path))
			return
		}
		s.serveResource(w, r, id, body)
	}
}

func (s *Server) serveSubscriptionProvider(w http.ResponseWriter, r *http.Request, seg []string) {
	unlock := func() {}
	defer func() { unlock() }()
	// /subscriptions/S/providers/NS/locations/L/operations/ID
	if len(seg) == 8 && strings.EqualFold(seg[4], "locations") && (strings.EqualFold(seg[6], "operations") || strings.EqualFold(seg[6], "operationResults")) {
		s.serveOperation(w, seg[7], strings.EqualFold(seg[6], "operationResults"))
		return
	}
	if len(seg) == 7 && strings.EqualFold(seg[4], "locations") && strings.EqualFold(seg[6], "publishers") {
		s.servePublishers(w, seg[5])
		return
	}
	if len(seg) >= 8 && strings.EqualFold(seg[4], "locations") && strings.EqualFold(seg[6], "publishers") {
		s.serveImages(w, seg[5], seg[7:])
		return
	}
	if len(seg) >= 8 && strings.EqualFold(seg[4], "locations") && strings.EqualFold(seg[6], "communityGalleries") {
		s.serveCommunityGallery(w, seg[5], seg[7:])
		return
	}
	if len(seg) == 5 && strings.EqualFold(seg[3], "Microsoft.Compute") && strings.EqualFold(seg[4], "skus") {
		s.serveResourceSKUs(w, r)
		return
	}
	if len(seg) == 5 {
		// Everything of a type in the subscription.
		kind := seg[3] + "/" + seg[4]
		unlock = s.lock()
		var items []any
		for _, res := range s.sortedResources() {
			if res.id.Subscription == seg[1] && strings.EqualFold(res.id.Kind(), kind) {
				items = append(items, s.render(res))
			}
		}
		unlock()
		writeList(w, items)
		return
	}
	writeError(w, errorf(http.StatusNotFound, "NotFound", "No route for %s.", r.URL.Path))
}

func (s *Server) sortedResources() []*resource {
	out := make([]*resource, 0, len(s.resources))
	for _, r := range s.resources {
		out = append(out, r)
	}
	sortResources(out)
	return out
}

func writeList(w http.ResponseWriter, items []any) {
	if items == nil {
		items = []any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": items})
}

func (s *Server) groupExists(sub, rg string) bool {
	g, ok := s.groups[rgKey(sub, rg)]
	return ok && !g.deleting
}

func (s *Server) serveResource(w http.ResponseWriter, r *http.Request, id resourceID, body map[string]any) {
	unlock := func() {}
	defer func() { unlock() }()
	if c, ok := inlineChildOf(id); ok {
		s.serveInline(w, r, id, c, body)
		return
	}
	if id.IsCollection() {
		last := id.Types[len(id.Types)-1]
		owner := id
		owner.Types = id.Types[:len(id.Types)-1]
		switch {
		case r.Method == http.MethodPost && len(owner.Names) > 0:
			s.serveAction(w, r, owner, strings.ToLower(last), body)
		case r.Method == http.MethodGet && strings.EqualFold(last, "instanceView") && len(owner.Names) > 0:
			s.serveInstanceView(w, owner)
		case r.Method == http.MethodGet:
			s.serveList(w, id, expandsInstanceView(r))
		default:
			writeError(w, errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "%s is not allowed on %s.", r.Method, id.Kind()))
		}
		return
	}
	k := kinds[strings.ToLower(id.Kind())]
	if k == nil {
		writeError(w, errorf(http.StatusBadRequest, "InvalidResourceType", "The resource type '%s' could not be found in the namespace '%s'.", strings.Join(id.Types, "/"), id.Namespace))
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		unlock = s.lock()
		res := s.lookup(id.String())
		var out map[string]any
		if res != nil {
			out = s.render(res)
		}
		unlock()
		if res == nil {
			unlock = s.lock()
			inGroup := s.groupExists(id.Subscription, id.ResourceGroup)
			unlock()
			if !inGroup {
				writeError(w, groupNotFound(id.ResourceGroup))
				return
			}
			writeError(w, notFound(id))
			return
		}
		if expandsInstanceView(r) && k.instanceView != nil {
			unlock = s.lock()
			obj(out, "properties")["instanceView"] = k.instanceView(s, res)
			unlock()
		}
		writeJSON(w, http.StatusOK, out)
	case http.MethodPatch:
		if operationOf(r).Sync {
			s.updateTags(w, r, id, body)
			return
		}
		s.put(w, r, id, k, body)
	case http.MethodPut:
		if k.typ == kindInstance {
			s.updateInstance(w, r, id, body)
			return
		}
		if k.readOnly {
			writeError(w, errorf(http.StatusMethodNotAllowed, "OperationNotAllowed", "%s resources are managed by their parent and cannot be written directly.", id.Kind()))
			return
		}
		s.put(w, r, id, k, body)
	case http.MethodDelete:
		s.delete(w, r, id)
	default:
		writeError(w, errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "%s is not allowed on %s.", r.Method, id.Kind()))
	}
}

func expandsInstanceView(r *http.Request) bool {
	return strings.EqualFold(r.URL.Query().Get("$expand"), "instanceView")
}

func (s *Server) serveList(w http.ResponseWriter, id resourceID, expand bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.groupExists(id.Subscription, id.ResourceGroup) {
		writeError(w, groupNotFound(id.ResourceGroup))
		return
	}
	var items []any
	if len(id.Names) == 0 {
		for _, res := range s.inGroup(id.Subscription, id.ResourceGroup) {
			if strings.EqualFold(res.id.Kind(), id.Kind()) {
				items = append(items, s.render(res))
			}
		}
	} else {
		owner := id
		owner.Types = id.Types[:len(id.Types)-1]
		if s.lookup(owner.String()) == nil {
			writeError(w, notFound(owner))
			return
		}
		last := id.Types[len(id.Types)-1]
		if strings.EqualFold(owner.Kind(), "Microsoft.Compute/virtualMachineScaleSets") && strings.EqualFold(last, "networkInterfaces") {
			// Every instance's NICs.
			for _, inst := range s.children(owner, "virtualMachines") {
				for _, nic := range s.children(inst.id, "networkInterfaces") {
					items = append(items, s.render(nic))
				}
			}
		} else {
			for _, c := range s.children(owner, last) {
				out := s.render(c)
				if expand && c.kind.instanceView != nil {
					obj(out, "properties")["instanceView"] = c.kind.instanceView(s, c)
				}
				items = append(items, out)
			}
		}
	}
	writeList(w, items)
}

func groupNotFound(rg string) *armError {
	return errorf(http.StatusNotFound, "ResourceGroupNotFound", "Resource group '%s' could not be found.", rg)
}

// newResource builds a stored resource from a request body.
func newResource(id resourceID, k *kindInfo, body map[string]any) *resource {
	b := map[string]any{}
	for _, f := range []string{"location", "tags", "properties", "sku", "zones", "identity", "plan", "extendedLocation"} {
		if v, ok := body[f]; ok {
			b[f] = v
		}
	}
	b["id"] = id.String()
	b["name"] = id.Name()
	b["type"] = k.typ
	obj(b, "properties")
	return &resource{id: id, idStr: id.String(), kind: k, body: b, secrets: map[string]any{}}
}

func (s *Server) put(w http.ResponseWriter, r *http.Request, id resourceID, k *kindInfo, body map[string]any) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	res, _, created, e := s.putLocked(w, r, id, k, body)
	if e != nil {
		unlock()
		writeError(w, e)
		return
	}
	out := s.render(res)
	unlock()
	spec := operationOf(r)
	status := spec.Updated
	if created {
		status = spec.Created
	}
	writeJSON(w, status, out)
}

// putLocked stores what a PUT or PATCH asks for and starts its operation,
// whose polling headers it writes; the caller holds s.mu and writes the
// body.
func (s *Server) putLocked(w http.ResponseWriter, r *http.Request, id resourceID, k *kindInfo, body map[string]any) (*resource, *operation, bool, *armError) {
	if !s.groupExists(id.Subscription, id.ResourceGroup) {
		return nil, nil, false, groupNotFound(id.ResourceGroup)
	}
	if parent, ok := id.Parent(); ok && s.lookup(parent.String()) == nil {
		return nil, nil, false, notFound(parent)
	}
	old := s.lookup(id.String())
	if old != nil && old.deleting {
		return nil, nil, false, errorf(http.StatusConflict, "OperationNotAllowed", "The resource %s is being deleted.", id.Name())
	}
	if e := checkNameLength(id, k.typ); e != nil {
		return nil, nil, false, e
	}
	if e := checkTags(body); e != nil {
		return nil, nil, false, e
	}
	if e := ifMatchFails(r.Header.Get("If-Match"), old); e != nil {
		return nil, nil, false, e
	}
	if r.Header.Get("If-None-Match") == "*" && old != nil {
		return nil, nil, false, errorf(http.StatusPreconditionFailed, "PreconditionFailed", "The resource %s already exists.", id.Name())
	}
	if r.Method == http.MethodPatch {
		if old == nil {
			return nil, nil, false, notFound(id)
		}
		merged := s.render(old)
		mergePatch(merged, body)
		body = merged
	}
	res := newResource(id, k, body)
	res.tenant = callerOf(r).TenantID
	if old != nil && k.keepsUnsent {
		keepUnsent(old, res)
	}
	if k.topLevel && str(res.body, "location") == "" {
		return nil, nil, false, errorf(http.StatusBadRequest, "LocationRequired", "The location property is required for this definition.")
	}
	if e := checkLocation(k, res, old); e != nil {
		return nil, nil, false, e
	}
	if old != nil {
		for k, v := range old.secrets {
			if _, ok := res.secrets[k]; !ok {
				res.secrets[k] = v
			}
		}
	}
	if k.put != nil {
		if e := k.put(s, res, old); e != nil {
			return nil, nil, false, e
		}
	}
	res.etag = newETag()
	s.parentChanged(id, res.etag)
	if old == nil {
		res.setState("Creating")
	} else {
		res.setState("Updating")
		res.booted, res.up = old.booted, old.up
	}
	s.resources[key(res.idStr)] = res
	if k.sync {
		res.touch()
		return res, nil, old == nil, nil
	}
	op := s.startOperation(w, r, id.Subscription, id.Namespace, str(res.body, "location"))
	op.resultID = res.idStr
	delay := s.opts.OperationDelay + s.slowerOperation(r.Method, id.Types[len(id.Types)-1])
	if k.delay != nil {
		delay += k.delay(s, res)
	}
	s.expect(w, op, delay)
	s.after(delay, func() { s.completePut(op, res) })
	return res, op, old == nil, nil
}

func (s *Server) completePut(op *operation, res *resource) {
	unlock := func() {}
	defer func() { unlock() }()
	if res.kind.work != nil && !s.isDeleting(res) {
		res.kind.work(s, res)
	}
	unlock = s.lock()
	var boot []Machine
	var failed *armError
	if cur := s.lookup(res.idStr); cur == res && !res.deleting {
		if res.kind.ready != nil {
			boot, failed = res.kind.ready(s, res)
		}
		if failed != nil {
			res.setState("Failed")
		} else {
			res.setState("Succeeded")
		}
	}
	s.finishOperation(op, failed)
	stop := s.stopLater
	s.stopLater = nil
	unlock()
	s.stopMachines(stop)
	s.bootMachines(boot)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, id resourceID) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	res := s.lookup(id.String())
	if res == nil {
		unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !res.deleting && res.kind.canDelete != nil {
		if e := res.kind.canDelete(s, res); e != nil {
			unlock()
			writeError(w, e)
			return
		}
	}
	if res.kind.sync {
		stop := s.removeResource(res)
		unlock()
		s.stopMachines(stop)
		w.WriteHeader(http.StatusOK)
		return
	}
	res.deleting = true
	res.touch()
	s.parentChanged(id, newETag())
	op := s.startOperation(w, r, id.Subscription, id.Namespace, str(res.body, "location"))
	delay := s.opts.OperationDelay + s.slowerOperation(r.Method, id.Types[len(id.Types)-1])
	s.expect(w, op, delay)
	s.after(delay, func() {
		s.mu.Lock()
		stop := s.removeResource(res)
		s.finishOperation(op, nil)
		s.mu.Unlock()
		s.stopMachines(stop)
	})
	unlock()
	w.WriteHeader(http.StatusAccepted)
}

// removeResource deletes a resource and its children, undoing their side
// effects, and returns the machines to stop.
func (s *Server) removeResource(res *resource) []string {
	if s.lookup(res.idStr) != res {
		return nil
	}
	var stop []string
	prefix := key(res.idStr) + "/"
	for k, c := range s.resources {
		if strings.HasPrefix(k, prefix) {
			delete(s.resources, k)
			if c.kind.deleted != nil {
				stop = append(stop, c.kind.deleted(s, c)...)
			}
			if c.booted {
				stop = append(stop, c.idStr)
			}
		}
	}
	delete(s.resources, key(res.idStr))
	if res.kind.deleted != nil {
		stop = append(stop, res.kind.deleted(s, res)...)
	}
	if res.booted {
		stop = append(stop, res.idStr)
	}
	return stop
}

func (s *Server) bootMachines(ms []Machine) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	s.signalNetwork()
	if s.opts.Runtime == nil {
		// With no machine runtime nothing boots a guest, but Azure's power
		// state is the hypervisor's: a VM that provisioned is running.
		for _, m := range ms {
			if res := s.lookup(m.ID); res != nil {
				res.up = true
				res.touch()
			}
		}
	}
	unlock()
	if s.opts.Runtime == nil || len(ms) == 0 {
		return
	}
	// Marked before booting, so that a delete racing the boot stops it. A
	// machine already running is not booted again: updating a VM's model
	// does not rerun cloud-init on it.
	unlock = s.lock()
	fresh := ms[:0:0]
	for _, m := range ms {
		if res := s.lookup(m.ID); res != nil && !res.booted {
			res.booted = true
			fresh = append(fresh, m)
		}
	}
	unlock()
	for _, m := range fresh {
		go s.boot(m)
	}
}

// boot runs a machine; the VM counts as running once the runtime's Boot
// returns, whether or not its operating system came up (the instance view
// says so with BootStatus/failed).
func (s *Server) boot(m Machine) {
	unlock := func() {}
	defer func() { unlock() }()
	err := s.opts.Runtime.Boot(context.Background(), m)
	unlock = s.lock()
	if res := s.lookup(m.ID); res != nil {
		res.up = true
		res.touch()
		delete(res.secrets, "power")
		if err != nil {
			res.secrets["bootError"] = err.Error()
		}
	}
	unlock()
}

func (s *Server) stopMachines(ids []string) {
	if s.opts.Runtime == nil {
		return
	}
	for _, id := range ids {
		_ = s.opts.Runtime.Stop(context.Background(), id)
	}
}

// checkLocation refuses a location the emulator's Azure does not offer, as
// ARM does before the resource provider sees the request, and a PUT that
// moves an existing resource to another location.
func checkLocation(k *kindInfo, res, old *resource) *armError {
	loc := str(res.body, "location")
	if !k.topLevel || loc == "" {
		return nil
	}
	if !knownLocation(loc) {
		return errorf(http.StatusBadRequest, "LocationNotAvailableForResourceType",
			"The provided location '%s' is not available for resource type '%s'. List of available regions for the resource type is '%s'.", loc, k.typ, locationNames())
	}
	if old != nil && !sameLocation(str(old.body, "location"), loc) {
		return errorf(http.StatusConflict, "InvalidResourceLocation",
			"The resource '%s' already exists in location '%s' in resource group '%s'. A resource with the same name cannot be created in location '%s'. Please select a new resource name.",
			res.id.Name(), str(old.body, "location"), res.id.ResourceGroup, loc)
	}
	return nil
}

// parentChanged gives the parent of a child that Azure keeps in its body (a
// subnet, a security rule, a route, an inbound NAT rule) a new ETag: the
// child is part of the parent's state, so a write built from the parent as
// read before the child changed must fail its If-Match.
func (s *Server) parentChanged(id resourceID, etag string) {
	parent, ok := id.Parent()
	if !ok {
		return
	}
	p := s.lookup(parent.String())
	if p == nil {
		return
	}
	for typ := range p.kind.embedded {
		if strings.EqualFold(typ, id.Types[len(id.Types)-1]) {
			p.etag = etag
			p.touch()
		}
	}
}
