package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/nodessh"
)

// sshOptions is `winkube ssh`'s input, split as generate cluster's is
// (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); nodessh logs in.
type sshOptions struct {
	accessOptions
	// Node is the MACHINE|NODE argument and Command what follows --
	// (none: a shell).
	Node    string
	Command []string
	// Quiet leaves out the hops.
	Quiet bool
}

// Validate refuses a login no node could take, naming the flag, before the
// management cluster is asked.
func (o *sshOptions) Validate() error {
	return o.validate()
}

// Run logs in to the node and runs the command, or a shell on in; the
// remote command's exit status comes back as ExitStatus.
func (o *sshOptions) Run(ctx context.Context, in io.Reader, out, errOut io.Writer) error {
	progress := errOut
	if o.Quiet {
		progress = io.Discard
	}
	conn, err := o.connect(ctx, o.Node, progress)
	if err != nil {
		return err
	}
	defer conn.Close()
	if len(o.Command) > 0 {
		err = conn.Run(strings.Join(o.Command, " "), out, errOut)
	} else {
		err = conn.Shell(in, out, errOut)
	}
	var ee *nodessh.ExitError
	if errors.As(err, &ee) {
		return ExitStatus(ee.Status)
	}
	return err
}

func newSSHCommand() *cobra.Command {
	o := &sshOptions{}
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
			o.Node, o.Command = args[0], args[1:]
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	o.addFlags(cmd)
	cmd.Flags().BoolVarP(&o.Quiet, "quiet", "q", false, "do not print the hops")
	return cmd
}
