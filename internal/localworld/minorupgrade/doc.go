// Package minorupgrade holds the upgrade rehearsal: a mixed local world
// booted at the previous minor and upgraded to the current one through
// upgrade.Run, as `winkube plan upgrade --apply` does. Its test runs in
// make test (which builds bin/v1.35.4 through make tools-previous) and
// alone with make e2e-upgrade, both with -tags e2e: without the tag the
// package has no tests, so go test -short ./... does not link it.
package minorupgrade
