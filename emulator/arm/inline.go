package arm

import (
	"net/http"
	"strings"
)

// inlineChild is a child type that Azure keeps inside its parent's body
// (a load balancer's pools, frontends, probes and rules; an NSG's default
// rules) yet also serves at its own path. Its reads come from the parent;
// a write, where the specification has one, is a write of the parent, with
// the parent's validation and a long-running operation of its own.
type inlineChild struct {
	prop     string
	writable bool
	// items lists the children when the parent's body does not hold them.
	items func(parent *resource) []any
}

var inlineChildren = map[string]inlineChild{
	"microsoft.network/loadbalancers/backendaddresspools":          {prop: "backendAddressPools", writable: true},
	"microsoft.network/loadbalancers/frontendipconfigurations":     {prop: "frontendIPConfigurations"},
	"microsoft.network/loadbalancers/probes":                       {prop: "probes"},
	"microsoft.network/loadbalancers/loadbalancingrules":           {prop: "loadBalancingRules"},
	"microsoft.network/networksecuritygroups/defaultsecurityrules": {prop: "defaultSecurityRules", items: func(nsg *resource) []any { return nsgDefaultRules(nsg) }},
}

// inlineChildOf is the inline child type of a path's last type, if any.
func inlineChildOf(id resourceID) (inlineChild, bool) {
	c, ok := inlineChildren[strings.ToLower(id.Kind())]
	return c, ok
}

// inlineItems are a parent's children of one inline type as GET shows them.
func (s *Server) inlineItems(parent *resource, c inlineChild) []any {
	if c.items != nil {
		return c.items(parent)
	}
	return list(s.render(parent), "properties", c.prop)
}

func findNamed(items []any, name string) map[string]any {
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && strings.EqualFold(str(m, "name"), name) {
			return m
		}
	}
	return nil
}

// serveInline answers an inline child's Get, List, CreateOrUpdate and
// Delete.
func (s *Server) serveInline(w http.ResponseWriter, r *http.Request, id resourceID, c inlineChild, body map[string]any) {
	parentID := id
	parentID.Types = id.Types[:len(id.Types)-1]
	if !id.IsCollection() {
		parentID.Names = id.Names[:len(id.Names)-1]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.groupExists(id.Subscription, id.ResourceGroup) {
		writeError(w, groupNotFound(id.ResourceGroup))
		return
	}
	parent := s.lookup(parentID.String())
	if parent == nil {
		writeError(w, notFound(parentID))
		return
	}
	items := s.inlineItems(parent, c)
	if id.IsCollection() {
		writeList(w, items)
		return
	}
	name := id.Name()
	cur := findNamed(items, name)
	switch r.Method {
	case http.MethodGet:
		if cur == nil {
			writeError(w, notFound(id))
			return
		}
		writeJSON(w, http.StatusOK, cur)
	case http.MethodPut:
		item := map[string]any{"name": name, "properties": obj(body, "properties")}
		next := s.render(parent)
		var kept []any
		for _, it := range list(next, "properties", c.prop) {
			if m, ok := it.(map[string]any); !ok || !strings.EqualFold(str(m, "name"), name) {
				kept = append(kept, it)
			}
		}
		obj(next, "properties")[c.prop] = append(kept, item)
		s.writeParent(w, r, parent, next, id, c.prop, cur == nil)
	case http.MethodDelete:
		if cur == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next := s.render(parent)
		var kept []any
		for _, it := range list(next, "properties", c.prop) {
			if m, ok := it.(map[string]any); !ok || !strings.EqualFold(str(m, "name"), name) {
				kept = append(kept, it)
			}
		}
		if kept == nil {
			kept = []any{}
		}
		obj(next, "properties")[c.prop] = kept
		s.writeParent(w, r, parent, next, id, c.prop, false)
	}
}

// writeParent replaces the parent with next, as a PUT of the parent would,
// and answers for the child: its body after a PUT (201 when it is new), 202
// after a DELETE.
func (s *Server) writeParent(w http.ResponseWriter, r *http.Request, parent *resource, next map[string]any, child resourceID, prop string, created bool) {
	put := r.Clone(r.Context())
	put.Method = http.MethodPut
	put.Header.Set("If-Match", "")
	if e := ifMatchFails(r.Header.Get("If-Match"), parent); e != nil {
		writeError(w, e)
		return
	}
	res, op, _, e := s.putLocked(w, put, parent.id, parent.kind, next)
	if e != nil {
		writeError(w, e)
		return
	}
	if r.Method == http.MethodDelete {
		// The operation is the child's delete: its result is no content.
		op.method, op.resultID = http.MethodDelete, ""
		w.WriteHeader(http.StatusAccepted)
		return
	}
	out := findNamed(list(s.render(res), "properties", prop), child.Name())
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, out)
}

// decorateInline gives each inline child in a rendered parent what ARM
// shows on it: its type and the parent's etag, which is the child's.
func decorateInline(r *resource, out map[string]any) {
	for kind, c := range inlineChildren {
		if !strings.HasPrefix(kind, strings.ToLower(r.kind.typ)+"/") || c.items != nil {
			continue
		}
		typ := r.kind.typ + "/" + c.prop
		for _, it := range list(out, "properties", c.prop) {
			if m, ok := it.(map[string]any); ok {
				m["type"] = typ
				m["etag"] = r.etag
			}
		}
	}
}
