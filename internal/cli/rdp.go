package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/nodessh"
)

// RDPPort is where Windows listens for Remote Desktop.
const RDPPort = 3389

func newRDPCommand() *cobra.Command {
	o := &accessOptions{}
	var port int
	var bind string
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
		Args: oneNode("rdp"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if port < 0 || port > 65535 {
				return badInputf(cmd, "--local-port %d: want a TCP port from 1 to 65535 (0 picks a free one)", port)
			}
			out := cmd.OutOrStdout()
			t, opts, err := o.target(cmd.Context(), args[0], cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if !t.Windows() {
				return fmt.Errorf("%s (%s) is a Linux node: Remote Desktop reaches Windows nodes only; use '%s ssh %s'", args[0], t.Object, cmd.Root().CommandPath(), args[0])
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(port)))
			if err != nil {
				return fmt.Errorf("local port: %w (choose another with --local-port)", err)
			}
			defer ln.Close()
			conn, err := nodessh.DialJump(cmd.Context(), t, opts)
			if err != nil {
				return err
			}
			defer conn.Close()
			fmt.Fprintf(out, "Remote Desktop tunnel to %s (%s:%d) through %s@%s is open.\nConnect an RDP client to %s (mstsc /v:%s, xfreerdp /v:%s /u:capi). Ctrl-C closes it.\n",
				t.Hostname, t.Address, RDPPort, opts.User, conn.Via, ln.Addr(), ln.Addr(), ln.Addr())
			go func() { <-cmd.Context().Done(); _ = ln.Close() }()
			var wg sync.WaitGroup
			defer wg.Wait()
			for {
				c, err := ln.Accept()
				if err != nil {
					if cmd.Context().Err() != nil || errors.Is(err, net.ErrClosed) {
						return nil
					}
					return err
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					up, err := conn.DialNodePort(RDPPort)
					if err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "winkube: connection from %s: %s:%d cannot be reached: %v\n", c.RemoteAddr(), t.Address, RDPPort, err)
						return
					}
					defer up.Close()
					done := make(chan struct{}, 2)
					go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
					go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
					select {
					case <-done:
					case <-cmd.Context().Done():
					}
				}()
			}
		},
	}
	o.addFlags(cmd)
	cmd.Flags().IntVar(&port, "local-port", 5555, "local port the RDP client connects to")
	cmd.Flags().StringVar(&bind, "bind-address", "127.0.0.1", "local address to listen on")
	return cmd
}
