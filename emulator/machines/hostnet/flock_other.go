//go:build !unix

package hostnet

import (
	"errors"
	"os"
)

// lockFile cannot lock here: a local world's addresses are loopback
// blocks that only Linux routes without configuration.
func lockFile(*os.File) error {
	return errors.New("a local world runs on Linux only")
}
