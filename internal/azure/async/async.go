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

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
)

// Step starts an operation with start("") or resumes it with start(token),
// polls it once, and returns its result when done, or the token to resume it
// with next time. A token that no longer resumes (the operation is gone) is
// dropped: the caller starts over, which is safe because ARM PUTs and DELETEs
// are idempotent.
func Step[T any](ctx context.Context, token string, start func(resumeToken string) (*runtime.Poller[T], error)) (result T, next string, done bool, err error) {
	var zero T
	p, err := start(token)
	if err != nil {
		return zero, "", false, err
	}
	if !p.Done() {
		if _, err := p.Poll(ctx); err != nil {
			if token != "" && IsNotFound(err) {
				return zero, "", false, nil
			}
			// The operation was accepted; resume it rather than start
			// another.
			if next, terr := p.ResumeToken(); terr == nil {
				token = next
			}
			return zero, token, false, err
		}
	}
	if p.Done() {
		v, err := p.Result(ctx)
		return v, "", true, err
	}
	next, err = p.ResumeToken()
	return zero, next, false, err
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

// Ensure makes a resource what its spec says without blocking: it resumes
// the operation under way (token), or reads the resource and, unless it is
// already as wanted, starts a create-or-update.
func Ensure[T any](ctx context.Context, token string, upToDate func(context.Context) (bool, error), begin func(resumeToken string) (*runtime.Poller[T], error)) (next string, done bool, err error) {
	if token == "" {
		ok, err := upToDate(ctx)
		if err != nil {
			return "", false, err
		}
		if ok {
			return "", true, nil
		}
	}
	_, next, done, err = Step(ctx, token, begin)
	return next, done, err
}

// Delete deletes a resource without blocking; a resource already gone is done.
func Delete[T any](ctx context.Context, token string, begin func(resumeToken string) (*runtime.Poller[T], error)) (next string, done bool, err error) {
	_, next, done, err = Step(ctx, token, begin)
	if err != nil && IsNotFound(err) {
		return "", true, nil
	}
	return next, done, err
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
// operation ran and the resource failed (rather than a request that can be
// retried).
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
