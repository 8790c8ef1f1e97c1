package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

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
			case "yaml":
				data, err := yaml.Marshal(info)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(data)
				return err
			default:
				return checkOutput(cmd, output, "short", "json", "yaml")
			}
		},
	}
	outputFlag(cmd, &output, "", "short", "json", "yaml")
	return cmd
}
