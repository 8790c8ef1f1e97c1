package arm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

type savedResource struct {
	ID      string         `json:"id"`
	Body    map[string]any `json:"body"`
	Secrets map[string]any `json:"secrets,omitempty"`
	ETag    string         `json:"etag"`
}

type savedState struct {
	Groups    []savedResource `json:"groups"`
	Resources []savedResource `json:"resources"`
}

// Save writes every resource group and resource to path (atomically, by
// rename), so that a restarted emulator can Load them. Operations still
// under way are saved as finished.
func (s *Server) Save(path string) error {
	s.mu.Lock()
	var st savedState
	for _, g := range s.groups {
		if !g.deleting {
			st.Groups = append(st.Groups, savedResource{ID: g.idStr, Body: deepCopy(g.body)})
		}
	}
	for _, r := range s.sortedResources() {
		if r.deleting {
			continue
		}
		body := deepCopy(r.body)
		if st := str(body, "properties", "provisioningState"); st == "Creating" || st == "Updating" {
			obj(body, "properties")["provisioningState"] = "Succeeded"
		}
		secrets := deepCopy(r.secrets)
		// A power action under way is saved as done.
		switch secrets["power"] {
		case "stopping":
			secrets["power"] = "stopped"
		case "deallocating":
			secrets["power"] = "deallocated"
		case "starting":
			delete(secrets, "power")
		}
		st.Resources = append(st.Resources, savedResource{ID: r.idStr, Body: body, Secrets: secrets, ETag: r.etag})
	}
	s.mu.Unlock()
	data, err := json.MarshalIndent(st, "", " ")
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
		s.groups[key(g.ID)] = &resource{idStr: g.ID, body: g.Body}
	}
	var boot []Machine
	for _, sr := range st.Resources {
		id, ok := parseResourcePath(sr.ID)
		k := kinds[strings.ToLower(id.Kind())]
		if !ok || k == nil {
			s.mu.Unlock()
			return fmt.Errorf("arm: %s holds a resource of an unknown kind: %s", path, sr.ID)
		}
		secrets := sr.Secrets
		if secrets == nil {
			secrets = map[string]any{}
		}
		delete(secrets, "bootError")
		s.resources[key(sr.ID)] = &resource{id: id, idStr: sr.ID, kind: k, body: sr.Body, secrets: secrets, etag: sr.ETag}
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
