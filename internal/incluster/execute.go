package incluster

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/version"
)

// Execute runs the manager image's command line: 'manager' or 'admission'.
// Bad flags exit 2 and any other failure 1, as the winkube binary does.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "winkube-manager",
		Short:         "winkube's in-cluster commands: the provider's manager and the workload admission",
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(NewManagerCommand(), NewAdmissionCommand())
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return badInput(cmd, err)
	})
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "Error:", err)
		var coded interface{ ExitCode() int }
		if errors.As(err, &coded) {
			return coded.ExitCode()
		}
		return 1
	}
	return 0
}

// inputError is bad input, which exits 2 here and in the winkube binary
// (whose exit code reads ExitCode).
type inputError struct {
	err  error
	help string
}

func (e inputError) Error() string {
	return fmt.Sprintf("%v\nSee '%s --help' for usage.", e.err, e.help)
}

func (e inputError) Unwrap() error { return e.err }

// ExitCode is 2: the user changes a flag or a value.
func (inputError) ExitCode() int { return 2 }

func badInput(cmd *cobra.Command, err error) error {
	return inputError{err: err, help: cmd.CommandPath()}
}
