// Package async runs Azure long-running operations one step at a time, so
// that a reconcile never blocks on Azure: an operation is started (or resumed
// from the token a previous reconcile kept), polled once, and either finished
// or handed back as a resume token to keep in the object's status.
package async

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Step starts an operation with start(ctx, "") or resumes it with
// start(ctx, token), and either finds it done or returns the token to
// resume it with next time; start makes its requests with the ctx it is
// given. A token that no longer resumes (the operation is gone) is
// dropped: the caller starts over, which is safe because ARM PUTs and
// DELETEs are idempotent.
//
// A resumed operation is polled once. A new one is polled at once only
// when its resource provider gave no Retry-After, or one under a second:
// one that asked for a second or more cannot be done yet, and the Azure
// SDK's own PollUntilDone waits the first answer's Retry-After before its
// first poll (sdk/azcore/runtime/poller.go, azure-sdk-for-go @01333edb).
// The wait asked for (the first answer's, or the last poll's) is recorded
// in ctx's Wait (WithWait) for the caller's requeue.
func Step(ctx context.Context, token string, start func(ctx context.Context, resumeToken string) (Poller, error)) (next string, done bool, err error) {
	var initial *http.Response
	p, err := start(policy.WithCaptureResponse(ctx, &initial), token)
	if err != nil {
		return "", false, err
	}
	if !p.Done() {
		if wait := retryAfterOf(initial); token == "" && wait >= time.Second {
			noteWait(ctx, wait)
			next, err = p.ResumeToken()
			return next, false, err
		}
		resp, err := p.Poll(ctx)
		if err != nil {
			if token != "" && IsNotFound(err) {
				return "", false, nil
			}
			// The operation was accepted; resume it rather than start
			// another.
			if next, terr := p.ResumeToken(); terr == nil {
				token = next
			}
			return token, false, err
		}
		if !p.Done() {
			noteWait(ctx, retryAfterOf(resp))
		}
	}
	if p.Done() {
		return "", true, p.Finish(ctx)
	}
	next, err = p.ResumeToken()
	return next, false, err
}

// IsNotFound reports whether err is Azure's 404.
func IsNotFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// IgnoreNotFound is nil for Azure's 404 and err otherwise: a resource that
// does not exist is an answer, not a failure.
func IgnoreNotFound(err error) error {
	if IsNotFound(err) {
		return nil
	}
	return err
}

// Code is Azure's error code of err, or "".
func Code(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}

// Succeeded reports whether a provisioning state is Succeeded.
func Succeeded[S ~string](state *S) bool {
	return state != nil && string(*state) == "Succeeded"
}

// Message is Azure's error message of err (the body's error.message), or
// err's text.
func Message(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.RawResponse != nil {
		var body struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if re.RawResponse.Body != nil {
			if b, rerr := io.ReadAll(re.RawResponse.Body); rerr == nil && json.Unmarshal(b, &body) == nil && body.Error.Message != "" {
				return body.Error.Message
			}
		}
	}
	return err.Error()
}

// IsProvisioningFailure reports whether an Azure error code means the
// operation ran and the resource failed (rather than a request refused).
// It says nothing of whether sending the resource again can succeed: most
// of these (AllocationFailed, OSProvisioningTimedOut) can, and the caller
// decides (virtualmachines.ProvisioningFailedError.Terminal).
func IsProvisioningFailure(code string) bool {
	switch code {
	case "OSProvisioningTimedOut", "OSProvisioningClientError", "OSProvisioningInternalError", "VMExtensionProvisioningError",
		"AllocationFailed", "ZonalAllocationFailed", "SkuNotAvailable", "ProvisioningFailed":
		return true
	}
	return false
}

// IfMatch makes the requests made with the returned context conditional
// on the resource's ETag, when there is one: a write built from a read then
// fails with 412 PreconditionFailed, rather than overwriting what someone
// else wrote in between (the next reconcile reads again).
func IfMatch(ctx context.Context, etag *string) context.Context {
	if etag == nil || *etag == "" {
		return ctx
	}
	return policy.WithHTTPHeader(ctx, http.Header{"If-Match": []string{*etag}})
}
