// Package e2e holds end-to-end tests of operating a local world's
// cluster once it is up: three control planes and a crashed scheduler,
// the move of its Windows workers off Windows Server 2019, and rehearsed
// bootstrap failures diagnosed through Azure. They boot one world of their
// own, apart from package localworld's tests, so that go test runs the
// two packages' worlds side by side, each in its own process. Its tests
// build only with the e2e tag (make test passes -tags e2e), so the fast
// loop, go test -short ./..., does not link a binary whose every test
// would skip.
package e2e
