package controllers

import (
	"context"
	"errors"
	"net"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
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
