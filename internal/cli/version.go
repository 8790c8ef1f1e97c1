package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/version"
)

// versionOptions is `winkube version`'s input, as kubectl's and
// clusterctl's version commands take it (-o short, json or yaml).
type versionOptions struct {
	// Output is -o: "" for the one-line form.
	Output string
}

// Validate refuses an output format version cannot write.
func (o *versionOptions) Validate() error {
	if o.Output == "" {
		return nil
	}
	return checkOutput(nil, o.Output, "short", "json", "yaml")
}

// Run writes the version information in the chosen format.
func (o *versionOptions) Run(_ context.Context, out io.Writer) error {
	info := version.Get()
	switch o.Output {
	case "short":
		_, err := fmt.Fprintln(out, info.Version)
		return err
	case "json", "yaml":
		return printStructured(out, o.Output, info)
	}
	_, err := fmt.Fprintln(out, info.String())
	return err
}

func newVersionCommand() *cobra.Command {
	o := &versionOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the winkube version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return withHelp(cmd, err)
			}
			return o.Run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	outputFlag(cmd, &o.Output, "", "short", "json", "yaml")
	return cmd
}
