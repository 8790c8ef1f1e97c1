package async

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Wait is when the operations a reconcile left under way asked to be
// polled again: the Retry-After of the answer that started each one, or of
// its last poll. A reconcile that has nothing else to do comes back then,
// rather than at a fixed interval that polls an operation its resource
// provider said was not done yet. CAPZ cannot do this (its requeue is
// fixed, 15 s, because the SDK's poller does not hand out the header:
// azure/services/async/async.go requeueTime, cluster-api-provider-azure
// @69ec3a40); Step reads it from the responses themselves.
type Wait struct {
	mu  sync.Mutex
	d   time.Duration
	set bool
}

type waitKey struct{}

// WithWait returns a context in which Step records the waits of the
// operations it leaves under way, for Asked.
func WithWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, waitKey{}, &Wait{})
}

// Asked is the shortest wait an operation left under way with ctx asked
// for, and whether one asked at all.
func Asked(ctx context.Context) (time.Duration, bool) {
	w, _ := ctx.Value(waitKey{}).(*Wait)
	if w == nil {
		return 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.d, w.set
}

// noteWait records a wait asked for in ctx's Wait.
func noteWait(ctx context.Context, d time.Duration) {
	w, _ := ctx.Value(waitKey{}).(*Wait)
	if w == nil || d <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.set || d < w.d {
		w.d, w.set = d, true
	}
}

// retryAfterOf is the wait resp asks for, or 0.
func retryAfterOf(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	d, _ := RetryAfter(resp.Header)
	return max(d, 0)
}

// RetryAfter reads the wait a response asks for: ARM's milliseconds
// (x-ms-retry-after-ms, retry-after-ms) when present, else Retry-After in
// seconds or as an HTTP date (RFC 9110 section 10.2.3), in the Azure
// SDK's order of preference (sdk/azcore internal/shared RetryAfter).
func RetryAfter(h http.Header) (time.Duration, bool) {
	for _, k := range []string{"x-ms-retry-after-ms", "retry-after-ms"} {
		if ms, err := strconv.ParseInt(h.Get(k), 10, 64); err == nil && ms >= 0 {
			return time.Duration(ms) * time.Millisecond, true
		}
	}
	v := h.Get("Retry-After")
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return time.Until(at), true
	}
	return 0, false
}
