package arm

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// FaultConfig is what the control API's /emulator/faults reads and writes.
type FaultConfig struct {
	Faults               []Fault               `json:"faults"`
	ProvisioningFailures []ProvisioningFailure `json:"provisioningFailures"`
	// SKURestrictions are not faults but the subscription's state; they
	// are set here so that a test or a user can give the emulator a
	// subscription with restricted sizes.
	SKURestrictions []SKURestriction `json:"skuRestrictions,omitempty"`
}

// SetFaults replaces the injected faults.
func (s *Server) SetFaults(c FaultConfig) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	s.opts.Faults = c.Faults
	s.opts.ProvisioningFailures = c.ProvisioningFailures
	s.opts.SKURestrictions = c.SKURestrictions
	unlock()
}

// FaultConfig is a copy of the injected faults, with how many operations
// each provisioning failure has failed.
func (s *Server) FaultConfig() FaultConfig {
	unlock := s.lock()
	defer unlock()
	return FaultConfig{Faults: slices.Clone(s.opts.Faults), ProvisioningFailures: slices.Clone(s.opts.ProvisioningFailures), SKURestrictions: slices.Clone(s.opts.SKURestrictions)}
}

// serveControl is the emulator's own API, beside ARM's:
//
//	GET    /emulator/counters   requests served, by "METHOD kind"
//	DELETE /emulator/counters   zero them
//	GET    /emulator/faults     the injected faults
//	PUT    /emulator/faults     replace them (a FaultConfig)
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	unlock := func() {}
	defer func() { unlock() }()
	switch strings.TrimPrefix(r.URL.Path, "/emulator/") {
	case "counters":
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, s.Counters())
		case http.MethodDelete:
			s.ResetCounters()
			w.WriteHeader(http.StatusNoContent)
		default:
			writeError(w, errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "use GET or DELETE"))
		}
	case "faults":
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, s.FaultConfig())
		case http.MethodPut:
			var c FaultConfig
			if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
				writeError(w, errorf(http.StatusBadRequest, "InvalidRequestContent", "The fault configuration is not valid JSON: %v", err))
				return
			}
			for _, f := range c.Faults {
				if f.Percent < 0 || f.Percent > 100 || (f.Status != 0 && (f.Status < 400 || f.Status > 599)) {
					writeError(w, errorf(http.StatusBadRequest, "InvalidFault", "A fault needs percent 0-100 and a status from 400 to 599; got %v%% and %d.", f.Percent, f.Status))
					return
				}
			}
			for _, f := range c.ProvisioningFailures {
				if f.Code == "" || f.Times < 0 || (f.Operation != "" && f.Operation != OperationCreate && f.Operation != OperationAttachDataDisk) {
					writeError(w, errorf(http.StatusBadRequest, "InvalidFault", "A provisioning failure needs a code, times of 0 or more, and an operation of %q, %q or none; got %q, %d and %q.", OperationCreate, OperationAttachDataDisk, f.Code, f.Times, f.Operation))
					return
				}
			}
			s.SetFaults(c)
			writeJSON(w, http.StatusOK, c)
		default:
			writeError(w, errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "use GET or PUT"))
		}
	default:
		writeError(w, errorf(http.StatusNotFound, "NotFound", "No emulator API at %s.", r.URL.Path))
	}
}
