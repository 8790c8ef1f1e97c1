package arm

import (
	"fmt"
	"net/http"
)

// armError is ARM's error body: {"error":{"code","message","target"}}. The
// codes are Azure's own, so that code written against the emulator handles
// the errors Azure really returns.
type armError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Target  string `json:"target,omitempty"`
	// Challenge, when set, is the WWW-Authenticate header of a 401.
	Challenge string `json:"-"`
}

func (e *armError) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, format string, args ...any) *armError {
	return &armError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalidParameter(target, format string, args ...any) *armError {
	e := errorf(http.StatusBadRequest, "InvalidParameter", format, args...)
	e.Target = target
	return e
}

func notFound(id resourceID) *armError {
	return errorf(http.StatusNotFound, "ResourceNotFound", "The Resource '%s/%s' under resource group '%s' was not found.", id.Kind(), id.Name(), id.ResourceGroup)
}

func invalidReference(from, to string) *armError {
	return errorf(http.StatusBadRequest, "InvalidResourceReference", "Resource %s referenced by resource %s was not found. Please make sure that the referenced resource exists, and that both resources are in the same region.", to, from)
}
