package arm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type savedResource struct {
	ID string `json:"id"`
	// Body is kept as the JSON it was marshalled to under the emulator's
	// lock, so that saving copies each resource once.
	Body    json.RawMessage `json:"body"`
	Secrets map[string]any  `json:"secrets,omitempty"`
	ETag    string          `json:"etag,omitempty"`
	// ProvisioningState, when set, replaces the body's: an operation under
	// way is saved as finished.
	ProvisioningState string `json:"provisioningState,omitempty"`
}

type savedState struct {
	Groups    []savedResource `json:"groups"`
	Resources []savedResource `json:"resources"`
}

// Save writes every resource group and resource to path (atomically, by
// rename), so that a restarted emulator can Load them. Operations still
// under way are saved as finished. Saves are serialized: the file always
// holds the latest of them.
func (s *Server) Save(path string) error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	data, err := s.encodeState()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".emulator-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// encodeState is the state file: a savedState, resources sorted by ID,
// byte for byte as encoding/json writes it. It is assembled from each
// entry's own encoding, since json.Marshal of the whole would re-read
// every resource's already encoded JSON.
func (s *Server) encodeState() ([]byte, error) {
	groups, resources, err := s.snapshot()
	if err != nil {
		return nil, err
	}
	// Groups too are sorted (they used to come in map order), so that
	// the same state is always the same file.
	sort.Slice(groups, func(i, j int) bool { return groups[i].id < groups[j].id })
	sort.Slice(resources, func(i, j int) bool { return resources[i].id < resources[j].id })
	size := len(`{"groups":null,"resources":[]}`) + len(groups) + len(resources)
	for _, g := range groups {
		size += len(g.json)
	}
	for _, r := range resources {
		size += len(r.json)
	}
	out := make([]byte, 0, size)
	out = append(out, `{"groups":`...)
	if groups == nil {
		out = append(out, "null"...) // as encoding/json writes a nil slice
	} else {
		out = append(out, '[')
		for i, g := range groups {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, g.json...)
		}
		out = append(out, ']')
	}
	out = append(out, `,"resources":[`...)
	for i, r := range resources {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, r.json...)
	}
	return append(out, "]}"...), nil
}

// savedJSON is one resource's entry in the state file.
type savedJSON struct {
	id   string
	json []byte
}

// snapshot encodes what Save writes. It holds the lock every request
// needs only to copy the resources that changed since the last Save (their
// version moved: touch) as the old code copied all of them; the rest keep
// the entry a former Save encoded. Entries are encoded after the lock is
// released; saveMu, held by the caller, guards them.
func (s *Server) snapshot() (groups, resources []savedJSON, err error) {
	unlock := func() {}
	defer func() { unlock() }()
	type changed struct {
		r     *resource
		rev   uint64
		entry savedResource
		at    int
	}
	var fresh []changed
	unlock = s.lock()
	for _, g := range s.groups {
		if g.deleting {
			continue
		}
		// A handful of groups: not worth keeping.
		b, err := json.Marshal(g.body)
		if err != nil {
			unlock()
			return nil, nil, err
		}
		e, err := json.Marshal(savedResource{ID: g.idStr, Body: b})
		if err != nil {
			unlock()
			return nil, nil, err
		}
		groups = append(groups, savedJSON{id: g.idStr, json: e})
	}
	resources = make([]savedJSON, 0, len(s.resources))
	for _, r := range s.resources {
		if r.deleting {
			continue
		}
		if r.saved == nil || r.savedRev != r.rev {
			sr, err := savedEntry(r)
			if err != nil {
				unlock()
				return nil, nil, err
			}
			fresh = append(fresh, changed{r: r, rev: r.rev, entry: sr, at: len(resources)})
		}
		resources = append(resources, savedJSON{id: r.idStr, json: r.saved})
	}
	unlock()
	for _, c := range fresh {
		e, err := json.Marshal(c.entry)
		if err != nil {
			return nil, nil, err
		}
		c.r.saved, c.r.savedRev = e, c.rev
		resources[c.at].json = e
	}
	return groups, resources, nil
}

// savedEntry is a resource as the state file holds it.
func savedEntry(r *resource) (savedResource, error) {
	b, err := json.Marshal(r.body)
	if err != nil {
		return savedResource{}, err
	}
	sr := savedResource{ID: r.idStr, Body: b, ETag: r.etag}
	if ps := r.provisioningState(); ps == "Creating" || ps == "Updating" {
		sr.ProvisioningState = "Succeeded"
	}
	// Secrets hold strings and numbers only: a shallow copy is theirs.
	sr.Secrets = make(map[string]any, len(r.secrets))
	for k, v := range r.secrets {
		sr.Secrets[k] = v
	}
	// A power action under way is saved as done.
	switch sr.Secrets["power"] {
	case "stopping":
		sr.Secrets["power"] = "stopped"
	case "deallocating":
		sr.Secrets["power"] = "deallocated"
	case "starting":
		delete(sr.Secrets, "power")
	}
	return sr, nil
}

// Load replaces the emulator's resources with those saved at path and boots
// the VMs and instances among them again.
func (s *Server) Load(path string) error {
	unlock := func() {}
	defer func() { unlock() }()
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var st savedState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("arm: %s is not an emulator state file: %w", path, err)
	}
	unlock = s.lock()
	s.groups = map[string]*resource{}
	s.resources = map[string]*resource{}
	for _, g := range st.Groups {
		var body map[string]any
		if err := json.Unmarshal(g.Body, &body); err != nil {
			unlock()
			return fmt.Errorf("arm: %s: resource group %s: %w", path, g.ID, err)
		}
		s.groups[key(g.ID)] = &resource{idStr: g.ID, body: body}
	}
	var boot []Machine
	for _, sr := range st.Resources {
		id, ok := parseResourcePath(sr.ID)
		k := kinds[strings.ToLower(id.Kind())]
		if !ok || k == nil {
			unlock()
			return fmt.Errorf("arm: %s holds a resource of an unknown kind: %s", path, sr.ID)
		}
		var body map[string]any
		if err := json.Unmarshal(sr.Body, &body); err != nil || body == nil {
			unlock()
			return fmt.Errorf("arm: %s: resource %s has no body: %v", path, sr.ID, err)
		}
		secrets := sr.Secrets
		if secrets == nil {
			secrets = map[string]any{}
		}
		delete(secrets, "bootError")
		res := &resource{id: id, idStr: sr.ID, kind: k, body: body, secrets: secrets, etag: sr.ETag}
		if sr.ProvisioningState != "" {
			res.setState(sr.ProvisioningState)
		}
		if k.typ == kindVM && res.provisioningState() == "Succeeded" {
			res.secrets[secretMade] = "true" // saved before the emulator recorded it
		}
		s.resources[key(sr.ID)] = res
	}
	for _, r := range s.resources {
		if r.provisioningState() != "Succeeded" || switchedOff(r) {
			continue // a stopped or deallocated VM stays off until started
		}
		switch r.kind.typ {
		case kindVM:
			p := r.props()
			boot = append(boot, s.machineOf(r, str(r.body, "location"), obj(p, "storageProfile"), obj(p, "osProfile"), list(p, "networkProfile", "networkInterfaces"), r.secrets, "", ""))
		case kindInstance:
			parent, _ := r.id.Parent()
			if vmss := s.lookup(parent.String()); vmss != nil {
				boot = append(boot, s.instanceMachine(vmss, r))
			}
		}
	}
	unlock()
	s.bootMachines(boot)
	return nil
}
