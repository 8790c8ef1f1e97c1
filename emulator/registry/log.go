package registry

import (
	"io"
	"log"
)

// discard keeps the registry's per-request log lines out of winkube's output.
func discard() *log.Logger { return log.New(io.Discard, "", 0) }
