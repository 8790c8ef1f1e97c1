package arm

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// operation is a long-running ARM operation that pollers follow through the
// Azure-AsyncOperation and Location headers.
type operation struct {
	id      string
	status  string // InProgress, Succeeded, Failed, Canceled
	err     *armError
	started time.Time
	ended   time.Time
	// due is when the emulator expects to finish it (zero: at once).
	due time.Time
	// method is the request's; resultID the resource a PUT or PATCH wrote,
	// which the result URL answers with once the operation succeeds.
	method, resultID string
	// result is an action's answer (Run Command's RunCommandResult),
	// which the result URL gives once the operation succeeded.
	result map[string]any
	// scope is the resource the operation acts on, whose read permission
	// polling it needs.
	scope string
}

var opSeq atomic.Int64

// startOperation registers an operation and writes its polling headers. The
// caller completes it with finishOperation.
func (s *Server) startOperation(w http.ResponseWriter, r *http.Request, sub, namespace, location string) *operation {
	n := opSeq.Add(1)
	op := &operation{id: strconv.FormatInt(n, 10) + "-" + newUUID()[:8], status: "InProgress", started: time.Now(), method: r.Method,
		scope: strings.TrimRight(r.URL.Path, "/")}
	if r.Method == http.MethodPost {
		// .../virtualMachines/vm/start acts on the VM.
		op.scope = op.scope[:max(strings.LastIndex(op.scope, "/"), 0)]
	}
	s.ops[op.id] = op
	if location == "" {
		location = "local"
	}
	base := "https://" + r.Host + "/subscriptions/" + sub + "/providers/" + namespace + "/locations/" + location
	q := "?api-version=" + r.URL.Query().Get("api-version")
	w.Header().Set("Azure-AsyncOperation", base+"/operations/"+op.id+q)
	w.Header().Set("Location", base+"/operationResults/"+op.id+q)
	setRetryAfter(w, s.opts.PollInterval)
	return op
}

// expect records when an operation started by the request w answers is
// due to finish, and asks its pollers to come back then: Retry-After is
// the resource provider's estimate of the time still needed, which the
// Azure SDK waits before its first poll (sdk/azcore runtime/poller.go
// PollUntilDone, azure-sdk-for-go @01333edb) and between polls; the
// emulator knows its own delays, so its estimate is the time left, never
// less than PollInterval.
func (s *Server) expect(w http.ResponseWriter, op *operation, delay time.Duration) {
	op.due = op.started.Add(delay)
	setRetryAfter(w, s.pollWait(op, op.started))
}

// pollWait is how long a poller of op should wait from now.
func (s *Server) pollWait(op *operation, now time.Time) time.Duration {
	return max(op.due.Sub(now), s.opts.PollInterval)
}

func (s *Server) finishOperation(op *operation, err *armError) {
	op.ended = time.Now()
	if err != nil {
		op.status, op.err = "Failed", err
		return
	}
	op.status = "Succeeded"
	s.signalNetwork()
}

// serveOperation answers a poll of an operation's status (.../operations/ID)
// or its result (.../operationResults/ID).
func (s *Server) serveOperation(w http.ResponseWriter, id string, result bool) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	op, ok := s.ops[id]
	var body, final map[string]any
	status, method := "", ""
	wait := s.opts.PollInterval
	if ok {
		wait = s.pollWait(op, time.Now())
		method = op.method
		if res := s.lookup(op.resultID); res != nil && op.status == "Succeeded" && !res.deleting {
			final = s.render(res)
		}
		if op.result != nil && op.status == "Succeeded" {
			final = deepCopy(op.result)
		}
		status = op.status
		body = map[string]any{"id": id, "name": id, "status": op.status, "startTime": op.started.UTC().Format(time.RFC3339Nano)}
		if !op.ended.IsZero() {
			body["endTime"] = op.ended.UTC().Format(time.RFC3339Nano)
		}
		if op.err != nil {
			body["error"] = map[string]any{"code": op.err.Code, "message": op.err.Message}
		}
	}
	unlock()
	if !ok {
		writeError(w, errorf(http.StatusNotFound, "OperationNotFound", "The operation '%s' could not be found.", id))
		return
	}
	if status == "InProgress" {
		setRetryAfter(w, wait)
	}
	if result {
		switch status {
		case "InProgress":
			w.WriteHeader(http.StatusAccepted)
		case "Succeeded":
			// A PUT's or PATCH's result is the resource (the specification's
			// final-state-via: location); an action's is its answer, or
			// an empty 200; a delete's, no content.
			switch {
			case final != nil:
				writeJSON(w, http.StatusOK, final)
			case method == http.MethodPost:
				w.WriteHeader(http.StatusOK)
			default:
				w.WriteHeader(http.StatusNoContent)
			}
		default:
			writeJSON(w, http.StatusOK, map[string]any{"error": body["error"]})
		}
		return
	}
	writeJSON(w, http.StatusOK, body)
}
