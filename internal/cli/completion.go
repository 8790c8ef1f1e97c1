package cli

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/nodeaccess"
)

// Shell completion: static choices for flavors and versions, the local
// worlds found in ~/.winkube, and machines and nodes read from the
// management cluster. Completion never fails loudly: with nothing to offer
// it offers nothing.

func fixed(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// kubernetesVersions offers every patch of the newest minor winkube knows
// images for, and the first patch of the three minors before it.
func kubernetesVersions() []string {
	n := images.NewestPublished
	var out []string
	for p := n.Patch; p >= 0; p-- {
		out = append(out, images.Version{Major: 1, Minor: n.Minor, Patch: p}.String())
	}
	for m := n.Minor - 1; m >= n.Minor-3 && m >= images.OldestPublished.Minor; m-- {
		out = append(out, images.Version{Major: 1, Minor: m}.String())
	}
	return out
}

// localWorlds lists the state directories under ~/.winkube that hold a
// world's management kubeconfig.
func localWorlds() []string {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(home, ".winkube"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(home, ".winkube", e.Name(), localworld.ManagementKubeconfig)); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

func completeLocalWorlds(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return localWorlds(), cobra.ShellCompDirectiveNoFileComp
}

// completeNodes offers the machines and nodes of the management cluster the
// command's flags point at (--kubeconfig, --context, -n, --local).
func completeNodes(o *accessOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault // the remote command after --
		}
		if err := o.resolveLocal(); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, ns, err := o.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		names, err := nodeaccess.Names(ctx, c, ns, o.cluster)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, n := range names {
			out = append(out, cobra.CompletionWithDesc(n.Name, n.What))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// registerCompletions adds the completions of the flags every command
// shares by name.
func registerCompletions(root *cobra.Command) {
	byFlag := map[string]cobra.CompletionFunc{
		"flavor":             fixed(flavors.Names()...),
		"windows-version":    fixed("2019", "2022", "2025"),
		"kubernetes-version": fixed(kubernetesVersions()...),
		"local": func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return localWorlds(), cobra.ShellCompDirectiveNoFileComp
		},
		"state-dir": func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
	}
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		for name, fn := range byFlag {
			if cmd.Flags().Lookup(name) != nil {
				_ = cmd.RegisterFlagCompletionFunc(name, fn)
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// outputFlag adds -o/--output as kubectl has it: a format, one of formats,
// offered by completion.
func outputFlag(cmd *cobra.Command, p *string, def string, formats ...string) {
	usage := "output format: " + strings.Join(formats[:len(formats)-1], ", ") + " or " + formats[len(formats)-1]
	cmd.Flags().StringVarP(p, "output", "o", def, usage)
	_ = cmd.RegisterFlagCompletionFunc("output", fixed(formats...))
}

// checkOutput refuses a format outside formats, naming them.
func checkOutput(cmd *cobra.Command, got string, formats ...string) error {
	for _, f := range formats {
		if got == f {
			return nil
		}
	}
	if strings.ContainsAny(got, "./") {
		return badInputf(cmd, "--output %q: --output is a format (%s); to write a file use --write-to %s", got, strings.Join(formats, ", "), got)
	}
	return badInputf(cmd, "--output %q: use one of %s", got, strings.Join(formats, ", "))
}
