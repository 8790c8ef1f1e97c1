// Package minorupgrade holds the upgrade rehearsal: a mixed local world
// booted at the previous minor and upgraded to the current one through
// upgrade.Run, as `winkube plan upgrade --apply` does. Its test is behind
// the build tag upgradee2e (make e2e-upgrade), needs bin/v1.35.4 (make
// tools-previous), and is not part of make test while its Linux step can
// hang.
package minorupgrade
