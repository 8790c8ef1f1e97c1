// Package cli holds the cobra commands of the winkube binary. Each command
// parses flags and hands the work to the package that does it.
package cli

import (
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/incluster"
)

// PluginName is the name under which kubectl finds winkube as its plugin
// ('kubectl winkube ssh NODE'): the same binary, linked or copied.
const PluginName = "kubectl-winkube"

// NewRootCommandFor builds the command tree for the name the binary was
// invoked by: as kubectl's plugin, its help speaks of 'kubectl winkube'.
func NewRootCommandFor(arg0 string) *cobra.Command {
	root := newRootCommand()
	if strings.TrimSuffix(filepath.Base(arg0), ".exe") == PluginName {
		// The name stays winkube (cobra's Name is Use's first word); the
		// display name is what help and messages show.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl winkube"}
		// kubectl's users work with clusters that exist: the commands that
		// run a management plane, a cloud or a local world stay winkube's.
		for _, c := range root.Commands() {
			if c.Annotations[pluginAnnotation] != "true" {
				root.RemoveCommand(c)
			}
		}
		speakAsPlugin(root)
		root.Long = strings.Replace(root.Long, "  source <(winkube completion bash)     # or zsh, fish, powershell",
			"  kubectl (1.26+) completes 'kubectl winkube' through an executable named\n  kubectl_complete-winkube on PATH that runs: kubectl-winkube __complete \"$@\"\n  ('make build' writes one into bin/)", 1)
	}
	registerCompletions(root)
	enforceUsage(root)
	return root
}

// pluginWords are the commands whose names in help texts and examples
// become 'kubectl winkube ...' when run as kubectl's plugin; 'winkube up' and
// the like stay, as those are the winkube binary's.
var pluginWords = regexp.MustCompile(`\bwinkube (ssh|rdp|logs|generate|version|doctor|plan|images|node)\b`)

func speakAsPlugin(c *cobra.Command) {
	fix := func(s string) string {
		return strings.ReplaceAll(pluginWords.ReplaceAllString(s, "kubectl $0"), "kubectl kubectl ", "kubectl ")
	}
	c.Long, c.Example = fix(c.Long), fix(c.Example)
	for _, sub := range c.Commands() {
		speakAsPlugin(sub)
	}
}

// pluginAnnotation marks the commands offered as 'kubectl winkube ...'.
const pluginAnnotation = "winkube.dev/kubectl-plugin"

func forPlugin(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[pluginAnnotation] = "true"
	return cmd
}

// NewRootCommand builds the winkube command tree.
func NewRootCommand() *cobra.Command { return NewRootCommandFor("winkube") }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "winkube",
		Short: "Mixed Linux/Windows Kubernetes clusters on Azure, or on this machine",
		Long: `winkube creates and runs Kubernetes clusters with a Linux control plane and
Windows and Linux worker nodes. It is a Cluster API infrastructure provider for
Azure, and it carries an Azure emulator and machine runtime so that the same
clusters can run on one machine with no cloud at all.

Exit codes: 0 success, 1 failure, 2 bad input (a flag, argument or value to
change; the message names it). 'winkube ssh NODE -- COMMAND' exits with the
remote command's status.

Shell completion (flavors, versions, local worlds, machines and nodes):
  source <(winkube completion bash)     # or zsh, fish, powershell`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(forPlugin(newVersionCommand()), newEmulatorCommand(), incluster.NewManagerCommand(), forPlugin(newGenerateCommand()), incluster.NewAdmissionCommand(),
		newUpCommand(), newDownCommand(), newBenchCommand(), forPlugin(newSSHCommand()), forPlugin(newRDPCommand()), forPlugin(newLogsCommand()),
		forPlugin(newDoctorCommand()), forPlugin(newPlanCommand()), forPlugin(newRehearseCommand()), forPlugin(newImagesCommand()), newImageCommand(), forPlugin(newNodeCommand()), forPlugin(newMachineCommand()))
	return root
}
