package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/nodessh"
)

// RDPPort is where Windows listens for Remote Desktop.
const RDPPort = 3389

// rdpOptions is `winkube rdp`'s input, split as generate cluster's is
// (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d).
type rdpOptions struct {
	accessOptions
	// Node is the NODE argument.
	Node string
	// LocalPort is where the RDP client connects (0 picks a free one) and
	// BindAddress the local address it listens on.
	LocalPort   int
	BindAddress string
	// CommandPath is the command's name in messages (winkube or kubectl
	// winkube).
	CommandPath string
}

// Validate refuses a local end no tunnel could listen on, naming the flag.
func (o *rdpOptions) Validate() error {
	if o.LocalPort < 0 || o.LocalPort > 65535 {
		return badInputf(nil, "--local-port %d: want a TCP port from 1 to 65535 (0 picks a free one)", o.LocalPort)
	}
	if _, port, err := net.SplitHostPort(o.BindAddress); err == nil {
		return badInputf(nil, "--bind-address %s: give the address alone, such as 127.0.0.1; the port is --local-port %s", o.BindAddress, port)
	}
	if o.BindAddress == "" {
		return badInputf(nil, "--bind-address \"\": give the local address to listen on, such as 127.0.0.1 (0.0.0.0 for every interface)")
	}
	return nil
}

// Run opens the tunnel to the Windows node's port 3389 and keeps it open
// until ctx ends; errOut gets the hops and the connections that fail.
func (o *rdpOptions) Run(ctx context.Context, out, errOut io.Writer) error {
	t, opts, err := o.target(ctx, o.Node, errOut)
	if err != nil {
		return err
	}
	if !t.Windows() {
		return fmt.Errorf("%s (%s) is a Linux node: Remote Desktop reaches Windows nodes only; use '%s ssh %s'", o.Node, t.Object, o.CommandPath, o.Node)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.LocalPort)))
	if err != nil {
		return fmt.Errorf("local port: %w (choose another with --local-port)", err)
	}
	defer ln.Close()
	conn, err := nodessh.DialJump(ctx, t, opts)
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintf(out, "Remote Desktop tunnel to %s (%s:%d) through %s@%s is open.\nConnect an RDP client to %s (mstsc /v:%s, xfreerdp /v:%s /u:capi). Ctrl-C closes it.\n",
		t.Hostname, t.Address, RDPPort, opts.User, conn.Via, ln.Addr(), ln.Addr(), ln.Addr())
	return conn.Forward(ctx, ln, RDPPort, func(from net.Addr, err error) {
		fmt.Fprintf(errOut, "winkube: connection from %s: %s:%d cannot be reached: %v\n", from, t.Address, RDPPort, err)
	})
}

func newRDPCommand() *cobra.Command {
	o := &rdpOptions{}
	cmd := &cobra.Command{
		Use:   "rdp NODE",
		Short: "Tunnel Remote Desktop to a Windows node through the API server's host",
		Long: `rdp opens what 'ssh -L PORT:<windows-ip>:3389 capi@<api-server-ip>' opens: a
local port whose connections go, through a control-plane VM as jump host, to
port 3389 of the Windows node's private address. Connect an RDP client to
localhost:PORT; the tunnel stays open until Ctrl-C. Linux nodes have no Remote
Desktop and are refused.

The Windows admin password winkube sets is random and never stored: log in
with an account you set a password for (over 'winkube ssh').

` + accessExamples,
		Example: `  winkube rdp win-p8k2x-7tq4m --local-port 5555
  xfreerdp /v:localhost:5555 /u:capi`,
		Args: oneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Node, o.CommandPath = args[0], cmd.Root().CommandPath()
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	o.addFlags(cmd)
	cmd.Flags().IntVar(&o.LocalPort, "local-port", 5555, "local port the RDP client connects to")
	cmd.Flags().StringVar(&o.BindAddress, "bind-address", "127.0.0.1", "local address to listen on")
	return cmd
}
