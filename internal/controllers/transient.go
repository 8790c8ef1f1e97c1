package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/winkube/winkube/internal/azure/async"
)

// fromAzure reports whether an error is Azure's answer, or the failure to
// get one, rather than the user's configuration: such an error is retried
// with the controller's backoff, never parked as InvalidConfiguration
// (which waits for a change to the object, or the resync hours later).
func fromAzure(err error) bool {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// Throttling. The services' SDK clients never retry (cloud.Cloud): a
// request Azure refuses for now comes back to the reconcile at once, and
// the object is requeued for when Azure said to come back, instead of a
// worker sleeping through the SDK's retries while every other object of
// its kind waits. CAPZ does the same: its clients make one try
// (azure/defaults.go ARMClientOptions, Retry.MaxRetries -1), and a 429's
// Retry-After becomes the reconcile's RequeueAfter
// (azure/services/async/async.go getRetryAfterFromError,
// controllers/azuremachine_controller.go; cluster-api-provider-azure
// @69ec3a40).
const (
	// defaultThrottleWait is the wait after a 429 that names none, as CAPZ
	// waits (util/reconciler/defaults.go DefaultHTTP429RetryAfter @69ec3a40).
	defaultThrottleWait = time.Minute
	// DefaultMinThrottleWait is the shortest wait after a 429: ARM's
	// Retry-After counts whole seconds, and a header of 0 must not turn
	// into a loop.
	DefaultMinThrottleWait = time.Second
	// maxThrottleWait bounds a Retry-After: ARM's throttling windows are
	// minutes, and a date far off (a clock skewed, a proxy's header) must
	// not park an object for longer.
	maxThrottleWait = 10 * time.Minute
)

// throttled says whether Azure refused a request for now, a 429, or a 503
// with a Retry-After, and when to come back.
func throttled(err error) (time.Duration, bool) {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return 0, false
	}
	var h http.Header
	if re.RawResponse != nil {
		h = re.RawResponse.Header
	}
	wait, given := async.RetryAfter(h)
	switch {
	case re.StatusCode == http.StatusTooManyRequests && !given:
		wait = defaultThrottleWait
	case re.StatusCode == http.StatusTooManyRequests, re.StatusCode == http.StatusServiceUnavailable && given:
	default:
		return 0, false
	}
	return min(wait, maxThrottleWait), true
}

// maxOperationWait bounds the Retry-After of an operation under way: a
// header far off must not leave an operation unlooked-at for long.
const maxOperationWait = time.Minute

// operationRequeue is when a reconcile that left operations under way,
// and has nothing else to do, comes back: when Azure asked for them to be
// polled again (async.Asked), not sooner than requeue, the controller's
// interval, nor later than maxOperationWait; requeue when Azure said
// nothing.
func operationRequeue(ctx context.Context, requeue time.Duration) time.Duration {
	wait, ok := async.Asked(ctx)
	if !ok {
		return requeue
	}
	return min(max(wait, requeue), maxOperationWait)
}

// requeueWhenThrottled, deferred first in a Reconcile (so that it runs
// last, after the status is written), turns a throttled error into a
// requeue after Azure's wait: returned as an error, the request would come
// back on the controller's backoff (milliseconds at first), long before
// Azure takes requests again, and spend more of the subscription's budget.
// Azure's wait is made at least floor (DefaultMinThrottleWait when zero).
func requeueWhenThrottled(ctx context.Context, floor time.Duration, res *ctrl.Result, reterr *error) {
	wait, ok := throttled(*reterr)
	if !ok {
		return
	}
	if floor <= 0 {
		floor = DefaultMinThrottleWait
	}
	wait = max(wait, floor)
	log.FromContext(ctx).Info("Azure is throttling requests: retrying after the wait it asked for", "after", wait, "error", (*reterr).Error())
	*res, *reterr = ctrl.Result{RequeueAfter: wait}, nil
}

// passing says whether an error is Azure's for now rather than for good:
// throttled, a server error, or no answer in time. The services make one
// try per call, so one such answer is enough to fail a reconcile.
func passing(err error) bool {
	if _, ok := throttled(err); ok {
		return true
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode >= http.StatusInternalServerError || re.StatusCode == http.StatusRequestTimeout
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// reportAzureError sets Ready False with what failed and why; but a
// passing error leaves a Ready object Ready: its resources are what they
// were, and one refused call (which the SDK's retries used to hide) must
// not tell Cluster API, and a MachineHealthCheck watching it, that a
// running machine is not, nor write a status that wakes the object again.
func reportAzureError(obj conditions.Setter, what string, err error) {
	if passing(err) && conditions.IsTrue(obj, ReadyCondition) {
		return
	}
	setReady(obj, metav1.ConditionFalse, azureReason(err), what+": "+describe(err))
}

// describe is an error as a condition's message. A throttled request's is
// the same every time: Azure's text counts down the seconds left, and a
// message that changed at every try would rewrite the status, and the
// write would wake the object again before its wait is over.
func describe(err error) string {
	var re *azcore.ResponseError
	if _, ok := throttled(err); ok && errors.As(err, &re) {
		return fmt.Sprintf("Azure refused the request for now (HTTP %d %s): winkube retries after the wait Azure asked for; "+
			"if this lasts, lower the request rate (fewer clusters or machines per subscription, or per identity)", re.StatusCode, re.ErrorCode)
	}
	return err.Error()
}
