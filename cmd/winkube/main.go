// Command winkube creates and runs mixed Linux/Windows Kubernetes clusters.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/winkube/winkube/internal/cli"
)

func main() {
	// Ctrl-C and SIGTERM cancel the command's context, so long-running
	// commands (manager, emulator, up) shut down cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.NewRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
