package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/webhooks"
)

// Exit codes, as kubectl and clusterctl users expect them; `winkube ssh`
// exits with the remote command's status instead.
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitBadInput = 2
)

// UsageError is bad input: a flag, an argument or a value winkube refuses
// before it does anything. It exits with ExitBadInput and points to --help.
type UsageError struct {
	Err  error
	Help string // the command path whose --help explains the input
}

func (e *UsageError) Error() string {
	if e.Help == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("%v\nSee '%s --help' for usage.", e.Err, e.Help)
}

func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode is ExitBadInput.
func (e *UsageError) ExitCode() int { return ExitBadInput }

// badInput marks err as the user's input to change, seen from cmd.
func badInput(cmd *cobra.Command, err error) error {
	if err == nil {
		return nil
	}
	var u *UsageError
	if errors.As(err, &u) {
		return err
	}
	if cmd == nil {
		return &UsageError{Err: err}
	}
	return &UsageError{Err: err, Help: cmd.CommandPath()}
}

// usageCause is the message of bad input without the pointer to --help,
// to be put in a message of another command's.
func usageCause(err error) error {
	var u *UsageError
	if errors.As(err, &u) {
		return u.Err
	}
	return err
}

func badInputf(cmd *cobra.Command, format string, args ...any) error {
	return badInput(cmd, fmt.Errorf(format, args...))
}

// Execute runs the command line args as the binary invoked as arg0 and
// returns the process's exit code, having printed any error on stderr.
func Execute(ctx context.Context, arg0 string, args []string, stdout, stderr io.Writer) int {
	root := NewRootCommandFor(arg0)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return exitCode(root.ExecuteContext(ctx), stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	var status ExitStatus
	if errors.As(err, &status) {
		return status.ExitCode() // the remote command said what it had to
	}
	fmt.Fprintln(stderr, "Error:", err)
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return ExitFailure
}

// enforceUsage makes bad input exit with ExitBadInput everywhere in the tree:
// flag errors and argument errors point to the command's --help, and a
// command that only groups others refuses an unknown subcommand, suggesting
// the closest ones, instead of printing help and exiting 0.
func enforceUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return badInput(cmd, err) })
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
			cmd.Args = func(c *cobra.Command, args []string) error {
				if len(args) == 0 {
					return nil
				}
				return unknownCommand(c, args[0])
			}
			cmd.RunE = func(c *cobra.Command, args []string) error {
				return c.Help()
			}
		} else {
			check := cmd.Args
			if check == nil {
				check = cobra.NoArgs
			}
			cmd.Args = func(c *cobra.Command, args []string) error { return badInput(c, check(c, args)) }
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return &UsageError{Err: errors.New(msg), Help: cmd.CommandPath()}
}

// objectProblems turns the webhooks' refusal of generated objects into bad
// input naming the flags that produced the fields, where flagFor knows them.
func objectProblems(cmd *cobra.Command, err error, flagFor func(webhooks.Problem) string) error {
	var set *webhooks.SetError
	if !errors.As(err, &set) {
		return err
	}
	var lines []string
	for _, p := range set.Problems {
		if flag := flagFor(p); flag != "" {
			if p.Value != nil {
				lines = append(lines, fmt.Sprintf("%s %v: %s", flag, p.Value, p.Detail))
			} else {
				lines = append(lines, fmt.Sprintf("%s: %s", flag, p.Detail))
			}
			continue
		}
		lines = append(lines, p.String())
	}
	return badInput(cmd, errors.New(strings.Join(dedupe(lines), "\n")))
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
