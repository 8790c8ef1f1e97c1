package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/nodessh"
)

func newSSHCommand() *cobra.Command {
	o := &accessOptions{}
	quiet := false
	cmd := &cobra.Command{
		Use:   "ssh MACHINE|NODE [-- COMMAND...]",
		Short: "Log in to a node through the API server's host as jump host",
		Long: `ssh logs in to a node of a workload cluster as its bootstrap data allows (user
capi, key only): to a control-plane VM through its NAT port on the API server's
public address, and to any other node through a control-plane VM as jump host,
to the node's private address. MACHINE|NODE is a Machine, AzureMachine,
AzureMachinePoolMachine, VM or computer name, a Node name, or a private address.

With a COMMAND after --, ssh runs it and exits with its status; without one it
opens a shell (with a terminal when run from one). Windows nodes answer in
PowerShell.

Host keys are recorded in winkube's known-hosts file the first time and checked
afterwards; a changed key is refused without asking.

` + accessExamples,
		Example: `  winkube ssh win-p8k2x-7tq4m -- hostname
  winkube ssh --local winkube winkube-md-win-abcde-fghij
  kubectl winkube ssh my-node -i ~/.ssh/capz`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || cmd.ArgsLenAtDash() == 0 {
				return fmt.Errorf("name the node: %s MACHINE|NODE [-- COMMAND...]", cmd.CommandPath())
			}
			if d := cmd.ArgsLenAtDash(); (d < 0 && len(args) > 1) || d > 1 {
				return fmt.Errorf("one node at a time, and the command after --: %s %s -- %s", cmd.CommandPath(), args[0], strings.Join(args[1:], " "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			progress := cmd.ErrOrStderr()
			if quiet {
				progress = nilWriter{}
			}
			conn, err := o.connect(cmd.Context(), args[0], progress)
			if err != nil {
				return err
			}
			defer conn.Close()
			if len(args) > 1 {
				err = conn.Run(strings.Join(args[1:], " "), cmd.OutOrStdout(), cmd.ErrOrStderr())
			} else {
				err = conn.Shell(cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			var ee *nodessh.ExitError
			if errors.As(err, &ee) {
				return ExitStatus(ee.Status)
			}
			return err
		},
	}
	o.addFlags(cmd)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not print the hops")
	return cmd
}

type nilWriter struct{}

func (nilWriter) Write(p []byte) (int, error) { return len(p), nil }
