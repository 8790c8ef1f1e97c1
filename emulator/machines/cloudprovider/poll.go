package cloudprovider

import (
	"context"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
)

// PollEvery is how often the simulated controllers poll a long-running
// ARM operation: more often than the Azure SDK lets PollUntilDone (its
// floor is one second outside test binaries, azcore runtime/poller.go),
// since the emulator's operations take milliseconds.
const PollEvery = 100 * time.Millisecond

// Wait drives a long-running operation to its end, polling it every
// PollEvery with the poller's own Poll, which has no floor.
func Wait[T any](ctx context.Context, p *runtime.Poller[T], err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	for !p.Done() {
		if _, err := p.Poll(ctx); err != nil {
			return zero, err
		}
		if p.Done() {
			break
		}
		select {
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-time.After(PollEvery):
		}
	}
	return p.Result(ctx)
}
