package workload

import "context"

// WaitingPods is how many pods a Windows node's change brings to the
// reporter.
func (r *BuildReporter) WaitingPods(ctx context.Context) int {
	return len(r.waitingPods(ctx, nil))
}
