// Package cli holds the cobra commands of the winkube binary. Each command
// parses flags and hands the work to the package that does it.
package cli

import (
	"github.com/spf13/cobra"
)

// NewRootCommand builds the winkube command tree.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "winkube",
		Short: "Mixed Linux/Windows Kubernetes clusters on Azure, or on this machine",
		Long: `winkube creates and runs Kubernetes clusters with a Linux control plane and
Windows and Linux worker nodes. It is a Cluster API infrastructure provider for
Azure, and it carries an Azure emulator and machine runtime so that the same
clusters can run on one machine with no cloud at all.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand(), newEmulatorCommand(), newManagerCommand(), newGenerateCommand(), newAdmissionCommand(), newUpCommand(), newDownCommand(), newBenchCommand())
	return root
}
