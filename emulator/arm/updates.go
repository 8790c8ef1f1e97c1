package arm

import (
	"net/http"
)

// updateTags answers Network's UpdateTags: the resource's tags become the
// body's, at once. The specification does not mark these operations
// long-running, and the SDK's clients accept 200 only.
func (s *Server) updateTags(w http.ResponseWriter, r *http.Request, id resourceID, body map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res, e := s.existing(id, r.Header.Get("If-Match"))
	if e != nil {
		writeError(w, e)
		return
	}
	tags, ok := body["tags"].(map[string]any)
	if _, present := body["tags"]; present && !ok && body["tags"] != nil {
		writeError(w, errorf(http.StatusBadRequest, "InvalidRequestFormat", "Cannot parse the request: tags must be an object of strings."))
		return
	}
	if tags == nil {
		tags = map[string]any{}
	}
	res.body["tags"] = tags
	res.etag = newETag()
	res.touch()
	writeJSON(w, http.StatusOK, s.render(res))
}

// existing finds a resource that a write may change, with ARM's answers
// when it cannot: the group or the resource missing, being deleted, or not
// at the ETag the request's If-Match names.
func (s *Server) existing(id resourceID, ifMatch string) (*resource, *armError) {
	if !s.groupExists(id.Subscription, id.ResourceGroup) {
		return nil, groupNotFound(id.ResourceGroup)
	}
	res := s.lookup(id.String())
	if res == nil {
		return nil, notFound(id)
	}
	if res.deleting {
		return nil, errorf(http.StatusConflict, "OperationNotAllowed", "The resource %s is being deleted.", id.Name())
	}
	if e := ifMatchFails(ifMatch, res); e != nil {
		return nil, e
	}
	return res, nil
}

// ifMatchFails is ARM's answer to a write whose If-Match names another
// ETag than the resource's (or a resource that does not exist); nil when
// the condition holds or there is none.
func ifMatchFails(ifMatch string, cur *resource) *armError {
	if ifMatch == "" || ifMatch == "*" || (cur != nil && cur.etag == ifMatch) {
		return nil
	}
	return errorf(http.StatusPreconditionFailed, "PreconditionFailed", "The condition '%s' in the If-Match header was not met.", ifMatch)
}

// updateInstance answers VirtualMachineScaleSetVMs_Update, a PUT of one
// instance of a Uniform scale set. The instance's model is the scale
// set's, so what a caller may change on it is its own: tags and its
// protection policy. Anything else in the body is the scale set's and is
// kept as the scale set says. It is long-running: 202, then Succeeded.
func (s *Server) updateInstance(w http.ResponseWriter, r *http.Request, id resourceID, body map[string]any) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	res, e := s.existing(id, r.Header.Get("If-Match"))
	if e != nil {
		unlock()
		writeError(w, e)
		return
	}
	if tags, ok := body["tags"].(map[string]any); ok {
		res.body["tags"] = tags
	}
	if pp, ok := obj(body, "properties")["protectionPolicy"].(map[string]any); ok {
		res.props()["protectionPolicy"] = pp
	}
	res.etag = newETag()
	res.setState("Updating")
	op := s.startOperation(w, r, id.Subscription, id.Namespace, str(res.body, "location"))
	op.resultID, op.method = res.idStr, r.Method
	s.after(s.opts.OperationDelay, func() {
		s.mu.Lock()
		if s.lookup(res.idStr) == res && !res.deleting {
			res.setState("Succeeded")
		}
		s.finishOperation(op, nil)
		s.mu.Unlock()
	})
	out := s.render(res)
	unlock()
	writeJSON(w, operationOf(r).Updated, out)
}
