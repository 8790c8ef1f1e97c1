package arm

import (
	"net/http"
	"strings"
)

func (s *Server) serveGroup(w http.ResponseWriter, r *http.Request, sub, rg string, body map[string]any) {
	unlock := func() {}
	defer func() { unlock() }()
	k := rgKey(sub, rg)
	unlock = s.lock()
	g := s.groups[k]
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		unlock()
		if g == nil {
			if r.Method == http.MethodHead {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			writeError(w, groupNotFound(rg))
			return
		}
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		unlock = s.lock()
		out := s.renderGroup(g)
		unlock()
		writeJSON(w, http.StatusOK, out)
	case http.MethodPut, http.MethodPatch:
		if g != nil && g.deleting {
			unlock()
			writeError(w, errorf(http.StatusConflict, "ResourceGroupBeingDeleted", "The resource group '%s' is in deprovisioning state and cannot perform this operation.", rg))
			return
		}
		if r.Method == http.MethodPatch {
			if g == nil {
				unlock()
				writeError(w, groupNotFound(rg))
				return
			}
			mergePatch(g.body, body)
			out := s.renderGroup(g)
			unlock()
			writeJSON(w, http.StatusOK, out)
			return
		}
		if str(body, "location") == "" {
			unlock()
			writeError(w, errorf(http.StatusBadRequest, "LocationRequired", "The location property is required for this definition."))
			return
		}
		if !knownLocation(str(body, "location")) {
			unlock()
			writeError(w, errorf(http.StatusBadRequest, "LocationNotAvailableForResourceGroup",
				"The provided location '%s' is not available for resource group. List of available regions is '%s'.", str(body, "location"), locationNames()))
			return
		}
		status := http.StatusOK
		if g == nil {
			status = http.StatusCreated
			id := "/subscriptions/" + sub + "/resourceGroups/" + rg
			g = &resource{idStr: id, body: map[string]any{"id": id, "name": rg, "type": "Microsoft.Resources/resourceGroups"}}
			s.groups[k] = g
		} else if !strings.EqualFold(str(g.body, "location"), str(body, "location")) {
			unlock()
			writeError(w, errorf(http.StatusConflict, "InvalidResourceGroupLocation", "Invalid resource group location '%s'. The Resource group already exists in location '%s'.", str(body, "location"), str(g.body, "location")))
			return
		}
		g.body["location"] = body["location"]
		if t, ok := body["tags"]; ok {
			g.body["tags"] = t
		}
		out := s.renderGroup(g)
		unlock()
		writeJSON(w, status, out)
	case http.MethodDelete:
		if g == nil {
			unlock()
			// Unlike a resource's, a missing group's delete is an error
			// (the specification's ResourceGroups_Delete answers 200 or
			// 202 only).
			writeError(w, groupNotFound(rg))
			return
		}
		g.deleting = true
		op := s.startOperation(w, r, sub, "Microsoft.Resources", str(g.body, "location"))
		s.after(s.opts.OperationDelay, func() {
			s.mu.Lock()
			var stop []string
			// Everything in the group goes, whatever depends on what.
			for _, res := range s.inGroup(sub, rg) {
				stop = append(stop, s.removeResource(res)...)
			}
			delete(s.groups, k)
			s.finishOperation(op, nil)
			s.mu.Unlock()
			s.stopMachines(stop)
		})
		unlock()
		w.WriteHeader(http.StatusAccepted)
	default:
		unlock()
		writeError(w, errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "%s is not allowed on a resource group.", r.Method))
	}
}

func (s *Server) renderGroup(g *resource) map[string]any {
	out := deepCopy(g.body)
	state := "Succeeded"
	if g.deleting {
		state = "Deleting"
	}
	out["properties"] = map[string]any{"provisioningState": state}
	return out
}

func (s *Server) listGroups(w http.ResponseWriter, sub string) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	var items []any
	for _, g := range s.groups {
		if strings.HasPrefix(key(g.idStr), key("/subscriptions/"+sub+"/")) {
			items = append(items, s.renderGroup(g))
		}
	}
	unlock()
	writeList(w, items)
}

// listGroupResources lists the top-level resources of a group, as
// armresources' ListByResourceGroup does (subnets and instances are parts
// of their parents, not listed).
func (s *Server) listGroupResources(w http.ResponseWriter, sub, rg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.groupExists(sub, rg) {
		writeError(w, groupNotFound(rg))
		return
	}
	var items []any
	for _, res := range s.inGroup(sub, rg) {
		if len(res.id.Names) != 1 {
			continue
		}
		item := map[string]any{"id": res.idStr, "name": res.id.Name(), "type": res.kind.typ, "location": res.body["location"]}
		if t, ok := res.body["tags"]; ok {
			item["tags"] = t
		}
		items = append(items, item)
	}
	writeList(w, items)
}
