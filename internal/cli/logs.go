package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/nodelogs"
)

func newLogsCommand() *cobra.Command {
	o := &accessOptions{}
	var output, oldOutput string
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "logs NODE",
		Short: "Collect a node's logs over SSH into a folder or a tar archive",
		Long: `logs collects over the 'winkube ssh' path what CAPZ's log collector gathers:

  Windows  cloudbase-init log, kubelet log, containerd log, CNI log,
           Get-HnsNetwork and Get-HnsEndpoint, the kubelet version
  Linux    cloud-init output, the kubelet and containerd journals, CNI log,
           the kubelet version

Each goes into a file of --write-to: a new folder, or a .tar / .tar.gz archive.
A command that fails on the node does not stop the others; its error output is
kept beside it as FILE.error. --since keeps only lines stamped from then on.

` + accessExamples,
		Example: `  winkube logs win-p8k2x-7tq4m
  winkube logs --local winkube winkube-md-win-abcde-fghij --since 30m --write-to win.tar.gz`,
		Args: oneNode("logs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if oldOutput != "" {
				return badInputf(cmd, "--output %q: logs writes files with --write-to %s (-o/--output is a format in winkube's commands)", oldOutput, oldOutput)
			}
			if since < 0 {
				return badInputf(cmd, "--since %s: want a positive duration such as 30m or 2h", since)
			}
			start := time.Now()
			conn, err := o.connect(cmd.Context(), args[0], cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer conn.Close()
			if output == "" {
				output = fmt.Sprintf("%s-logs-%s", args[0], start.Format("20060102-150405"))
			}
			sink, err := nodelogs.NewSink(output)
			if err != nil {
				return err
			}
			var from time.Time
			if since > 0 {
				from = start.Add(-since)
			}
			out := cmd.OutOrStdout()
			t := conn.Target
			fmt.Fprintf(out, "collecting the logs of %s (%s, %s) into %s\n", t.Hostname, t.OS, t.Address, output)
			results, err := nodelogs.Collect(conn, nodelogs.Plan(t.Windows()), from, sink, func(r nodelogs.Result) {
				if r.Err != nil {
					fmt.Fprintf(out, "  %-22s failed: %v %s\n", r.File, r.Err, r.Stderr)
					return
				}
				fmt.Fprintf(out, "  %-22s %d bytes\n", r.File, r.Bytes)
			})
			if cerr := sink.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range results {
				if r.Err != nil {
					failed++
				}
			}
			fmt.Fprintf(out, "%d of %d collected in %s\n", len(results)-failed, len(results), time.Since(start).Round(time.Millisecond))
			if failed == len(results) {
				return fmt.Errorf("no log could be collected from %s", args[0])
			}
			return nil
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&output, "write-to", "", "folder, or .tar/.tar.gz archive, to write (default NODE-logs-TIME)")
	cmd.Flags().StringVarP(&oldOutput, "output", "o", "", "")
	_ = cmd.Flags().MarkHidden("output")
	cmd.Flags().DurationVar(&since, "since", 0, "only lines stamped within this long before now (e.g. 30m, 2h)")
	return cmd
}
