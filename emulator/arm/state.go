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
	st, err := s.snapshot()
	if err != nil {
		return err
	}
	sort.Slice(st.Resources, func(i, j int) bool { return st.Resources[i].ID < st.Resources[j].ID })
	data, err := json.Marshal(st)
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

// snapshot copies what Save writes. It holds the lock every request
// needs, so it marshals each body once and leaves the rest for later.
func (s *Server) snapshot() (savedState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st savedState
	for _, g := range s.groups {
		if g.deleting {
			continue
		}
		b, err := json.Marshal(g.body)
		if err != nil {
			return st, err
		}
		st.Groups = append(st.Groups, savedResource{ID: g.idStr, Body: b})
	}
	st.Resources = make([]savedResource, 0, len(s.resources))
	for _, r := range s.resources {
		if r.deleting {
			continue
		}
		b, err := json.Marshal(r.body)
		if err != nil {
			return st, err
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
		st.Resources = append(st.Resources, sr)
	}
	return st, nil
}

// Load replaces the emulator's resources with those saved at path and boots
// the VMs and instances among them again.
func (s *Server) Load(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var st savedState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("arm: %s is not an emulator state file: %w", path, err)
	}
	s.mu.Lock()
	s.groups = map[string]*resource{}
	s.resources = map[string]*resource{}
	for _, g := range st.Groups {
		var body map[string]any
		if err := json.Unmarshal(g.Body, &body); err != nil {
			s.mu.Unlock()
			return fmt.Errorf("arm: %s: resource group %s: %w", path, g.ID, err)
		}
		s.groups[key(g.ID)] = &resource{idStr: g.ID, body: body}
	}
	var boot []Machine
	for _, sr := range st.Resources {
		id, ok := parseResourcePath(sr.ID)
		k := kinds[strings.ToLower(id.Kind())]
		if !ok || k == nil {
			s.mu.Unlock()
			return fmt.Errorf("arm: %s holds a resource of an unknown kind: %s", path, sr.ID)
		}
		var body map[string]any
		if err := json.Unmarshal(sr.Body, &body); err != nil || body == nil {
			s.mu.Unlock()
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
	s.mu.Unlock()
	s.bootMachines(boot)
	return nil
}
