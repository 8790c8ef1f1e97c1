package arm

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Throttle is a per-subscription request budget, as ARM enforces one: a
// bucket of reads and one of writes that refill continuously.
type Throttle struct {
	ReadsPerHour  int
	WritesPerHour int
	// Burst is the bucket's size; the hourly budget when zero, as in ARM.
	Burst int
}

type bucket struct {
	tokens float64
	last   time.Time
}

// throttle spends one token of the request's budget, or answers 429 with the
// time until the next token as Retry-After.
func (s *Server) throttle(w http.ResponseWriter, sub, method string) *armError {
	kind, perHour := "reads", s.opts.Throttle.ReadsPerHour
	if method != http.MethodGet && method != http.MethodHead {
		kind, perHour = "writes", s.opts.Throttle.WritesPerHour
	}
	if perHour <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	k := sub + "/" + kind
	b, ok := s.buckets[k]
	size := float64(perHour)
	if s.opts.Throttle.Burst > 0 {
		size = float64(s.opts.Throttle.Burst)
	}
	if !ok {
		b = &bucket{tokens: size, last: now}
		s.buckets[k] = b
	}
	rate := float64(perHour) / time.Hour.Seconds()
	b.tokens = math.Min(size, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens < 1 {
		wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
		setRetryAfter(w, wait)
		w.Header().Set("x-ms-ratelimit-remaining-subscription-"+kind, "0")
		s.counters["THROTTLED "+kind]++
		return errorf(http.StatusTooManyRequests, "SubscriptionRequestsThrottled",
			"Number of '%s' requests for subscription '%s' actor '' exceeded. Please try again after '%d' seconds after additional tokens are available.", strings.TrimSuffix(kind, "s"), sub, int(math.Ceil(wait.Seconds())))
	}
	b.tokens--
	w.Header().Set("x-ms-ratelimit-remaining-subscription-"+kind, strconv.Itoa(int(b.tokens)))
	return nil
}

// setRetryAfter gives the wait in ARM's header (whole seconds) and, more
// precisely, in milliseconds, which the Azure SDK prefers when present.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	if d < time.Millisecond {
		d = time.Millisecond
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
	w.Header().Set("x-ms-retry-after-ms", strconv.FormatInt(d.Milliseconds(), 10))
}

// Fault makes a share of matching requests fail.
type Fault struct {
	// Method matches the HTTP method; empty matches all.
	Method string `json:"method,omitempty"`
	// Kind matches the resource kind (virtualMachines); empty matches all.
	Kind string `json:"kind,omitempty"`
	// Percent of matching requests that fail, 0 to 100.
	Percent float64 `json:"percent"`
	// Status is the HTTP status to answer (500, 429, ...).
	Status int `json:"status"`
	// Delay holds matching requests this long before answering normally.
	Delay time.Duration `json:"delay,omitempty"`
	// OperationDelay makes the long-running operations that matching PUTs
	// and DELETEs start take this much longer: Azure's VM deletes take
	// minutes, and what happens while one is under way (a crash, a
	// clusterctl move) is what a test of it needs time for.
	OperationDelay time.Duration `json:"operationDelay,omitempty"`
}

// slowerOperation is how much longer the operation a request of method on
// kind starts takes, by the injected faults; the caller holds s.mu.
func (s *Server) slowerOperation(method, kind string) time.Duration {
	var d time.Duration
	for _, f := range s.opts.Faults {
		if (f.Method == "" || strings.EqualFold(f.Method, method)) && (f.Kind == "" || strings.EqualFold(f.Kind, kind)) {
			d += f.OperationDelay
		}
	}
	return d
}

// ProvisioningFailure fails the operations on VMs whose name contains
// NameContains (all VMs when empty) with Azure's error Code. The VM is then
// in provisioning state Failed, and the next operation on it that
// succeeds returns it to Succeeded, as on Azure (a state is the outcome
// of the last operation: MicrosoftDocs/azure-compute-docs
// articles/virtual-machines/states-billing.md @3255b21d).
type ProvisioningFailure struct {
	NameContains string `json:"nameContains,omitempty"`
	// Code such as OSProvisioningTimedOut.
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
	// Operation narrows the failure to the VM's creation (OperationCreate:
	// the PUT that made it, and PUTs of it until one succeeds) or to an
	// operation that attaches a data disk (OperationAttachDataDisk); empty
	// fails every operation.
	Operation string `json:"operation,omitempty"`
	// Times is how many operations fail, after which the failure is spent:
	// an AllocationFailed that a retry clears. Zero fails every one.
	Times int `json:"times,omitempty"`
	// Failed counts the operations it failed (the control API shows it).
	Failed int `json:"failed,omitempty"`
}

// Operations a ProvisioningFailure narrows to.
const (
	OperationCreate         = "Create"
	OperationAttachDataDisk = "AttachDataDisk"
)

func (s *Server) injectFault(w http.ResponseWriter, method, kind string) *armError {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	var hit *Fault
	var delay time.Duration
	for i := range s.opts.Faults {
		f := &s.opts.Faults[i]
		if (f.Method != "" && !strings.EqualFold(f.Method, method)) || (f.Kind != "" && !strings.EqualFold(f.Kind, kind)) {
			continue
		}
		if f.Delay > 0 {
			delay += f.Delay
		}
		if f.Status != 0 && s.rng.Float64()*100 < f.Percent {
			hit = f
			break
		}
	}
	unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if hit == nil {
		return nil
	}
	if hit.Status == http.StatusTooManyRequests {
		setRetryAfter(w, 20*time.Millisecond)
		return errorf(hit.Status, "TooManyRequests", "Injected fault: too many requests for %s %s.", method, kind)
	}
	return errorf(hit.Status, "InternalServerError", "Injected fault: %s %s failed with %d.", method, kind, hit.Status)
}

// provisioningFailure is the failure, if any, of an operation on the VM or
// instance name that does ops (OperationCreate, OperationAttachDataDisk);
// a failure given Times counts this one. The caller holds s.mu.
func (s *Server) provisioningFailure(name string, ops ...string) *ProvisioningFailure {
	for i := range s.opts.ProvisioningFailures {
		f := &s.opts.ProvisioningFailures[i]
		if (f.NameContains != "" && !strings.Contains(name, f.NameContains)) || (f.Operation != "" && !slices.Contains(ops, f.Operation)) || (f.Times > 0 && f.Failed >= f.Times) {
			continue
		}
		f.Failed++
		return f
	}
	return nil
}

func (f *ProvisioningFailure) asError(vm string) *armError {
	msg := f.Message
	switch {
	case msg != "":
	case f.Code == "AllocationFailed" || f.Code == "ZonalAllocationFailed":
		// As Azure words it (MicrosoftDocs/azure-docs
		// articles/virtual-machines/troubleshooting/error-messages.md).
		msg = "Allocation failed. We do not have sufficient capacity for the requested VM size in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"
	case f.Code == "OSProvisioningTimedOut":
		msg = fmt.Sprintf("OS Provisioning for VM '%s' did not finish in the allotted time. The VM may still finish provisioning successfully. Please check provisioning state later.", vm)
	default:
		// The emulator's own text.
		msg = fmt.Sprintf("The operation on VM '%s' failed with %s (injected).", vm, f.Code)
	}
	return errorf(http.StatusOK, f.Code, "%s", msg)
}
