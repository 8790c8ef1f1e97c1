// Command winkube creates and runs mixed Linux/Windows Kubernetes clusters.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/winkube/winkube/internal/cli"
)

func main() {
	// Ctrl-C and SIGTERM cancel the command's context, so long-running
	// commands (manager, emulator, up) shut down cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Output piped to a program that Ctrl-C ended too (winkube up | tee)
	// must not kill winkube in the middle of its shutdown: a closed pipe is
	// an error to the write, not a signal that ends the process.
	signal.Ignore(syscall.SIGPIPE)
	code := cli.Execute(ctx, os.Args[0], os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
