// Package incluster holds the commands that run inside a cluster from
// winkube's manager image: the provider's controllers and webhooks in a
// management cluster (manager) and the workload admission in a workload
// cluster (admission). It imports nothing of the simulation, so the image
// built from cmd/winkube-manager carries none of it; the winkube binary
// offers the same commands through internal/cli.
package incluster
