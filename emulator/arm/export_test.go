package arm

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"time"
)

// StaleSaveEntries lists the resources whose kept state-file entry is not
// what Save would encode now although their version did not move: a
// change made without touch, which Save would never write. It then brings
// every entry up to date, so that the next call finds the next such
// change.
func (s *Server) StaleSaveEntries() ([]string, error) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var stale []string
	for _, r := range s.resources {
		if r.deleting {
			continue
		}
		sr, err := savedEntry(r)
		if err != nil {
			return nil, err
		}
		e, err := json.Marshal(sr)
		if err != nil {
			return nil, err
		}
		if r.saved != nil && r.savedRev == r.rev && !bytes.Equal(r.saved, e) {
			stale = append(stale, r.idStr)
		}
		r.saved, r.savedRev = e, r.rev
	}
	sort.Strings(stale)
	return stale, nil
}

// EncodeStateBothWays returns the state file as Save writes it and as
// json.Marshal writes a savedState of every resource encoded afresh (what
// Save wrote before it kept entries), both of the same state.
func (s *Server) EncodeStateBothWays() (kept, fresh []byte, err error) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	// The state may move between the encodings (a boot finishing): then
	// they are taken again.
	for range 50 {
		before, err := s.encodeFresh()
		if err != nil {
			return nil, nil, err
		}
		if kept, err = s.encodeState(); err != nil {
			return nil, nil, err
		}
		after, err := s.encodeFresh()
		if err != nil {
			return nil, nil, err
		}
		if bytes.Equal(before, after) {
			return kept, after, nil
		}
	}
	return nil, nil, errors.New("the state kept changing while it was encoded")
}

func (s *Server) encodeFresh() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st savedState
	for _, g := range s.groups {
		if g.deleting {
			continue
		}
		b, err := json.Marshal(g.body)
		if err != nil {
			return nil, err
		}
		st.Groups = append(st.Groups, savedResource{ID: g.idStr, Body: b})
	}
	st.Resources = make([]savedResource, 0, len(s.resources))
	for _, r := range s.resources {
		if r.deleting {
			continue
		}
		sr, err := savedEntry(r)
		if err != nil {
			return nil, err
		}
		st.Resources = append(st.Resources, sr)
	}
	sort.Slice(st.Resources, func(i, j int) bool { return st.Resources[i].ID < st.Resources[j].ID })
	sort.Slice(st.Groups, func(i, j int) bool { return st.Groups[i].ID < st.Groups[j].ID })
	return json.Marshal(st)
}

// ServedOperation is what the conformance test reads of the served
// operations registry.
type ServedOperation struct {
	ID, Method, Path string
	APIVersions      []string
}

func ServedOperations() []ServedOperation {
	out := make([]ServedOperation, 0, len(servedOperations))
	for _, op := range servedOperations {
		out = append(out, ServedOperation{ID: op.ID, Method: op.Method, Path: op.Path, APIVersions: apiVersions[op.Versions]})
	}
	return out
}

// SetClock replaces the clock SAS expiry is checked against.
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}
