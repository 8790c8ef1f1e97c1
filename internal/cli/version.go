package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/version"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the winkube version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			switch output {
			case "":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), info.String())
				return err
			case "short":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), info.Version)
				return err
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			default:
				return fmt.Errorf("--output %q is not known: use short or json, or leave it out", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: short or json")
	return cmd
}
