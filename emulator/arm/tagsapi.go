package arm

import (
	"net/http"
	"strings"
)

// tagsSuffix ends the path of the tags of a scope.
const tagsSuffix = "/providers/Microsoft.Resources/tags/default"

// serveTagsAtScope answers the Tags API at a resource group's or a
// resource's scope, as ARM does (azure-resource-manager/management/
// tag-resources.md, "REST API"): GET is the scope's tags as a
// Microsoft.Resources/tags resource; PATCH with operation Merge adds or
// replaces the given tags, Replace makes them the only ones, and Delete
// removes each given name whose value is the given one (or any value, when
// the given one is empty). Nothing else of the resource changes; its ETag
// does, as a PUT of its tags would change it.
func (s *Server) serveTagsAtScope(w http.ResponseWriter, r *http.Request, body map[string]any) {
	scope := strings.TrimRight(r.URL.Path, "/")
	scope = scope[:len(scope)-len(tagsSuffix)]
	s.mu.Lock()
	defer s.mu.Unlock()
	res, e := s.tagScope(scope)
	if e != nil {
		writeError(w, e)
		return
	}
	if r.Method == http.MethodPatch {
		if res.deleting {
			writeError(w, errorf(http.StatusConflict, "OperationNotAllowed", "The resource %s is being deleted.", scope))
			return
		}
		props, _ := body["properties"].(map[string]any)
		given, _ := props["tags"].(map[string]any)
		cur, _ := res.body["tags"].(map[string]any)
		next := map[string]any{}
		for k, v := range cur {
			next[k] = v
		}
		switch op, _ := body["operation"].(string); {
		case strings.EqualFold(op, "Merge"):
			for k, v := range given {
				next[k] = v
			}
		case strings.EqualFold(op, "Replace"):
			next = map[string]any{}
			for k, v := range given {
				next[k] = v
			}
		case strings.EqualFold(op, "Delete"):
			for k, v := range given {
				if want, _ := v.(string); want == "" || next[k] == v {
					delete(next, k)
				}
			}
		default:
			writeError(w, errorf(http.StatusBadRequest, "InvalidRequestContent", "The request content was invalid: operation must be Merge, Replace or Delete, not '%s'.", op))
			return
		}
		if e := checkTags(map[string]any{"tags": next}); e != nil {
			writeError(w, e)
			return
		}
		res.body["tags"] = next
		res.etag = newETag()
		res.touch()
	}
	tags, _ := res.body["tags"].(map[string]any)
	if tags == nil {
		tags = map[string]any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": scope + tagsSuffix, "name": "default", "type": "Microsoft.Resources/tags",
		"properties": map[string]any{"tags": deepCopy(tags)}})
}

// tagScope is the resource group or resource whose tags a scope names; the
// caller holds s.mu.
func (s *Server) tagScope(scope string) (*resource, *armError) {
	seg := strings.Split(strings.Trim(scope, "/"), "/")
	if len(seg) < 4 {
		return nil, errorf(http.StatusBadRequest, "InvalidScope", "Tags at scope '%s' are served only for resource groups and resources.", scope)
	}
	if !s.groupExists(seg[1], seg[3]) {
		return nil, groupNotFound(seg[3])
	}
	if len(seg) == 4 {
		return s.groups[rgKey(seg[1], seg[3])], nil
	}
	id, ok := parseResourcePath(scope)
	if !ok || id.IsCollection() {
		return nil, errorf(http.StatusBadRequest, "InvalidScope", "'%s' is not a resource group or a resource.", scope)
	}
	res := s.lookup(id.String())
	if res == nil {
		return nil, notFound(id)
	}
	return res, nil
}
