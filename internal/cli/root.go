// Package cli holds the cobra commands of the winkube binary. Each command
// parses flags and hands the work to the package that does it.
package cli

import (
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// PluginName is the name under which kubectl finds winkube as its plugin
// ('kubectl winkube ssh NODE'): the same binary, linked or copied.
const PluginName = "kubectl-winkube"

// NewRootCommandFor builds the command tree for the name the binary was
// invoked by: as kubectl's plugin, its help speaks of 'kubectl winkube'.
func NewRootCommandFor(arg0 string) *cobra.Command {
	root := NewRootCommand()
	if strings.TrimSuffix(filepath.Base(arg0), ".exe") == PluginName {
		root.Use = "kubectl winkube"
		// cobra derives the name from the first word of Use.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl winkube"}
	}
	return root
}

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
	root.AddCommand(newVersionCommand(), newEmulatorCommand(), newManagerCommand(), newGenerateCommand(), newAdmissionCommand(), newUpCommand(), newDownCommand(), newBenchCommand(),
		newSSHCommand(), newRDPCommand(), newLogsCommand())
	return root
}
