// Package upstreame2e runs Kubernetes' own Windows end-to-end tests (the
// [sig-windows] specs of k8s.io/kubernetes test/e2e/windows at the pinned
// v1.36.3, built by hack/e2e) against a booted local world, and reads their
// JUnit report back into a summary.
//
// The world test is behind the build tag upstreame2e (make e2e-upstream): it
// needs bin/e2e.test and bin/ginkgo, which cost several CPU-minutes to build,
// and a run takes longer than CI's budget for `make test` allows. The
// classification of the specs (skips.go) and the report reading (junit.go)
// are plain unit-tested code.
package upstreame2e
