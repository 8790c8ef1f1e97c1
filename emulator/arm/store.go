package arm

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
)

// resource is one stored ARM resource. body is what GET returns; secrets
// (admin passwords, custom data) are kept apart because Azure never returns them.
type resource struct {
	id      resourceID
	idStr   string
	kind    *kindInfo
	body    map[string]any
	secrets map[string]any
	etag    string
	// deleting is set while a DELETE operation runs.
	deleting bool
	// booted is set once the machine runtime was asked to boot it (and
	// stays set while it is switched off: the runtime keeps its disk).
	booted bool
	// up is set once the runtime's Boot returned: the VM runs.
	up bool
	// rev moves (touch) whenever what Save writes of the resource may have
	// changed: its body, secrets, etag or provisioning state. A resource
	// replaced by a PUT is a new resource.
	rev uint64
	// saved is the resource's entry in the state file as of savedRev. Save
	// alone reads and writes it, under the server's saveMu, so it is
	// reused while rev stays the same.
	saved    []byte
	savedRev uint64
	// tenant is, while a PUT's hooks run, the tenant of its caller: where
	// the managed identities it creates live (identities.go).
	tenant string
}

// touch records that what Save writes of r changed. Every change to a
// stored resource's body, secrets or etag needs one, or a Save keeps the
// older entry; the package's tests check after every change that no
// entry is stale.
func (r *resource) touch() { r.rev++ }

func newETag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return `W/"` + hex.EncodeToString(b[:]) + `"`
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (r *resource) props() map[string]any { return obj(r.body, "properties") }

func (r *resource) provisioningState() string { return str(r.props(), "provisioningState") }

func (r *resource) setState(state string) {
	r.props()["provisioningState"] = state
	r.touch()
}

// obj returns m[k] as a map, creating it when missing.
func obj(m map[string]any, k string) map[string]any {
	if v, ok := m[k].(map[string]any); ok {
		return v
	}
	v := map[string]any{}
	m[k] = v
	return v
}

// get walks a path of keys through nested maps.
func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func str(m map[string]any, path ...string) string {
	s, _ := get(m, path...).(string)
	return s
}

func list(m map[string]any, path ...string) []any {
	l, _ := get(m, path...).([]any)
	return l
}

// deepCopy copies a body as a JSON round trip would, without one: every
// GET renders a copy, and encoding then decoding cost a read as much as
// the request's own encoding.
func deepCopy(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v any) any {
	switch x := v.(type) {
	case nil, string, float64, bool:
		return x
	case map[string]any:
		if x == nil {
			return nil
		}
		return deepCopy(x)
	case []any:
		if x == nil {
			return nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = copyValue(e)
		}
		return out
	}
	// Anything else (an int, a []string) becomes what JSON makes of it,
	// as it did when bodies were copied through JSON.
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// mergePatch applies an RFC 7386 JSON merge patch, as ARM's PATCH does.
func mergePatch(dst, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(dst, k)
			continue
		}
		if pm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergePatch(dm, pm)
				continue
			}
		}
		dst[k] = v
	}
}

// refID reads {"id": "..."} at a path.
func refID(m map[string]any, path ...string) string {
	return str(m, append(path, "id")...)
}

// lookup finds a resource by ID, ignoring case.
func (s *Server) lookup(id string) *resource {
	return s.resources[key(id)]
}

// children lists the stored children of a resource with the given type.
func (s *Server) children(parent resourceID, typ string) []*resource {
	prefix := key(parent.String() + "/" + typ + "/")
	var out []*resource
	for k, r := range s.resources {
		if strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			out = append(out, r)
		}
	}
	sortResources(out)
	return out
}

// inGroup lists every resource of a resource group.
func (s *Server) inGroup(sub, rg string) []*resource {
	prefix := rgKey(sub, rg) + "/"
	var out []*resource
	for k, r := range s.resources {
		if strings.HasPrefix(k, prefix) {
			out = append(out, r)
		}
	}
	sortResources(out)
	return out
}

func sortResources(rs []*resource) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].idStr < rs[j].idStr })
}

// render is the resource as GET returns it, with embedded children.
func (s *Server) render(r *resource) map[string]any {
	out := deepCopy(r.body)
	if !r.kind.sync { // sync kinds (availability sets) have no ETag
		out["etag"] = r.etag
	}
	if r.deleting {
		obj(out, "properties")["provisioningState"] = "Deleting"
	}
	for typ, prop := range r.kind.embedded {
		var items []any
		for _, c := range s.children(r.id, typ) {
			items = append(items, s.render(c))
		}
		if items == nil {
			items = []any{}
		}
		obj(out, "properties")[prop] = items
	}
	decorateInline(r, out)
	if r.kind.typ == kindNSG {
		obj(out, "properties")["defaultSecurityRules"] = nsgDefaultRules(r)
	}
	return out
}

// lock locks the store and returns what unlocks it, at most once. The
// functions that release the lock before they end (to write a response, or
// boot a machine, without it) defer a call of the last unlock as well: a
// handler that panics under the lock then leaves it unlocked, and one bad
// request does not wedge every later one.
func (s *Server) lock() (unlock func()) {
	s.mu.Lock()
	done := false
	return func() {
		if !done {
			done = true
			s.mu.Unlock()
		}
	}
}
