// Command winkube creates and runs mixed Linux/Windows Kubernetes clusters.
package main

import (
	"fmt"
	"os"

	"github.com/winkube/winkube/internal/cli"
)

func main() {
	if err := cli.NewRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
