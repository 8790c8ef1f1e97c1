// Command winkube-manager is what winkube's manager image runs: the
// provider's controllers and webhooks (manager) and the workload admission
// (admission). It is built without the Azure emulator and the machine
// runtime, which only the winkube binary's local world needs.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/winkube/winkube/internal/incluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := incluster.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
