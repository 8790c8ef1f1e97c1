// Package typha simulates Calico Typha, the fan-out proxy between the Kubernetes API and
// Felix: one Typha lists and watches the datastore for every syncer type and streams a
// snapshot plus deltas to each connected Felix, so the API server holds a handful of watches
// instead of one set per node.
//
// It mirrors projectcalico/calico v3.30.7 (74485ea40911c4868ae83ddb5da489c1533d1dba):
// typha/pkg/snapcache/cache.go (the breadcrumb cache), typha/pkg/syncserver/sync_server.go
// (handshake, pings, connection governor, graceful shedding), typha/pkg/syncproto/sync_proto.go
// (message kinds and port), typha/pkg/k8s/rebalance.go (the connection limit),
// typha/pkg/discovery/discovery.go (local-first address order), typha/pkg/config/config_params.go
// (defaults) and felix/daemon/daemon.go (how Felix connects and when it exits). The wire
// format is our own: updates carry kind, key and revision, never object bodies.
//
// The package knows Calico and Kubernetes only; wiring it to a machine is the caller's job.
package typha
