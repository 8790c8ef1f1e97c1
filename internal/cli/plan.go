package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/webhooks/workload"
	"github.com/winkube/winkube/internal/winupgrade"
)

func newPlanCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Plan changes to a cluster before making them",
		Long:  "Plan changes to a cluster: what would break, what to change first, and the manifests that make the change.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return badInputf(cmd, "name what to plan: winkube plan windows-upgrade --to 2022")
		},
	}
	cmd.AddCommand(newPlanWindowsUpgradeCommand(), newPlanUpgradeCommand())
	return cmd
}

// planOptions is `winkube plan windows-upgrade`'s input, split as generate
// cluster's is (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); winupgrade plans.
type planOptions struct {
	doctorOptions
	to       string
	writeTo  string
	mirror   string
	insecure []string
}

func newPlanWindowsUpgradeCommand() *cobra.Command {
	o := &planOptions{}
	cmd := &cobra.Command{
		Use:   "windows-upgrade --to 2022|2025",
		Short: "Plan the move of a cluster's Windows nodes to a newer Windows Server, and write the new pools",
		Long: `No platform upgrades a Windows node's OS in place: a pool of the new release
is created beside the old one, the workloads move, and the old pool is scaled
down. A process-isolated container runs only on a host of its own build
(10.0.17763 = 2019, 10.0.20348 = 2022, 10.0.26100 = 2025; a 2025 host also runs
2022 images), so every workload pinned to a 2019 image breaks on the move.

This command reads the workload cluster (reached as 'winkube doctor' reaches
it) and reports, for every workload that can run on Windows (Deployments,
StatefulSets, DaemonSets, Jobs, CronJobs and bare Pods):
  - each container image, the Windows builds its manifest list offers (read
    from the registry as winkube admission reads it), whether it runs on the
    target, and if not the tag of the same repository that does;
  - nodeSelectors, affinities, node names, pool labels and tolerations that
    tie it to the nodes being replaced;
  - PodDisruptionBudgets that allow no disruption and would hold the drain;
  - Services whose behaviour changes (ClientIP affinity, ignored on 2019);
  - a target the platform no longer supports for the cluster's Kubernetes
    version.
With the management cluster (--management-kubeconfig, or --local), it writes
for each Windows MachineDeployment (or MachinePool) of another release a new
one for the target beside it: its AzureMachineTemplate (or AzureMachinePool),
bootstrap template and MachineDeployment (or MachinePool), with as many
replicas, named so that Windows' computer-name limits keep the pools apart.
--write-to DIR writes each to DIR/<new pool>.yaml; --write-to - prints them.

Then: apply the new pool, wait until its nodes are Ready, change the images
the plan names, drain the old nodes (kubectl drain respects the budgets), and
scale the old pool to 0.

Exit status: 0 when nothing breaks, 1 with warnings, 2 with errors (as doctor).`,
		Example: `  winkube plan windows-upgrade --to 2022 --local winkube
  winkube plan windows-upgrade --to 2022 --management-kubeconfig ~/.kube/config --cluster demo --write-to new-pools/
  winkube plan windows-upgrade --to 2025 --kubeconfig workload.kubeconfig -o json`,
		Args: cobra.NoArgs,
		RunE: optionsRunE(&o.doctorOptions, o),
	}
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "the Windows Server release to move to: 2022 or 2025 (required)")
	o.clusterFlags(cmd, "to write the new pools from the cluster's MachineDeployments and MachinePools", "plan for")
	f.StringVar(&o.writeTo, "write-to", "", "write each new pool to DIR/<new pool>.yaml (the directory is created), or print them with -")
	f.StringVar(&o.mirror, "registry-mirror", "", "read every image from this registry (host:port, plain HTTP) under <mirror>/<registry>/<repository>, as a containerd mirror serves them")
	f.StringSliceVar(&o.insecure, "insecure-registry", nil, "registries reached over plain HTTP (host:port)")
	outputFlag(cmd, &o.output, "text", "text", "json", "yaml")
	_ = cmd.RegisterFlagCompletionFunc("to", fixed("2022", "2025"))
	return cmd
}

// options is a command's input as the commands split it (clusterctl's cmd/
// and client/): checked before anything is asked, then run.
type options interface {
	Validate() error
	Run(ctx context.Context, out io.Writer) error
}

// optionsRunE is the RunE of a command reading a cluster through
// doctorOptions: o keeps the command for bad input's pointer to its --help.
func optionsRunE(d *doctorOptions, o options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		d.cmd = cmd
		return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout()) })
	}
}

// Validate refuses, before any cluster is asked, a release to move to that
// is not one, a format plan cannot write, output that would mix, and two
// local worlds.
func (o *planOptions) Validate() error {
	if err := checkOutput(nil, o.output, "text", "json", "yaml"); err != nil {
		return err
	}
	switch infrav1.WindowsServerVersion(o.to) {
	case infrav1.WindowsServer2022, infrav1.WindowsServer2025:
	case "":
		return badInputf(o.cmd, "--to is required: the Windows Server release to move to, 2022 or 2025")
	case infrav1.WindowsServer2019:
		return badInputf(o.cmd, "--to 2019: Windows Server 2019 is the release clusters are leaving (AKS retired it on 2026-03-01); move to 2022 or 2025")
	default:
		return badInputf(o.cmd, "--to %q: use 2022 or 2025 (Windows Server releases, by year)", o.to)
	}
	if o.writeTo == "-" && o.output != "text" {
		return badInputf(o.cmd, "--write-to - prints the pools' YAML, which would mix with -o %s: write them to a directory (--write-to DIR)", o.output)
	}
	return o.oneWorld()
}

// Run reads the cluster, writes the plan on out and the new pools where
// --write-to says; what the plan finds comes back as its ExitStatus.
func (o *planOptions) Run(ctx context.Context, out io.Writer) error {
	target := infrav1.WindowsServerVersion(o.to)
	if err := o.resolveLocal(); err != nil {
		return err
	}
	r := workload.NewResolver()
	r.Insecure = o.insecure
	r.Mirror = o.mirror
	if r.Mirror == "" && o.stateDir != "" {
		host, err := os.ReadFile(filepath.Join(o.stateDir, localworld.RegistryFile))
		if err != nil {
			return fmt.Errorf("the local world in %s has not said where its image registry is (%w): is it running? start it with 'winkube up'", o.stateDir, err)
		}
		r.Mirror = strings.TrimSpace(string(host))
	}
	opts := winupgrade.Options{Namespace: o.namespace, ClusterName: o.name, Target: target, Resolver: r}
	c, err := o.connect(ctx)
	if err != nil {
		return err
	}
	opts.Management, opts.ClusterName, opts.Workload = c.management, c.cluster, c.workload
	cfg := c.workloadConfig
	if dc, err := discovery.NewDiscoveryClientForConfig(cfg); err == nil {
		if info, err := dc.ServerVersion(); err == nil {
			opts.Version, _ = images.ParseVersion(info.GitVersion)
		}
	}
	plan, err := winupgrade.Run(ctx, opts)
	if err != nil {
		if o.stateDir != "" {
			return fmt.Errorf("%w (is the local world in %s running? start it with 'winkube up')", err, o.stateDir)
		}
		return err
	}
	if err := writePools(o.writeTo, plan, out); err != nil {
		return err
	}
	switch o.output {
	case "json", "yaml":
		err = printStructured(out, o.output, struct {
			*winupgrade.Plan
			ExitCode int `json:"exitCode"`
		}{plan, plan.ExitCode()})
	default:
		err = plan.WriteText(out)
		if err == nil && len(plan.Pools) > 0 && o.writeTo == "" {
			_, err = fmt.Fprintln(out, "Write the new pools with --write-to DIR (or - to print them).")
		}
	}
	if err != nil {
		return err
	}
	if code := plan.ExitCode(); code != 0 {
		return ExitStatus(code)
	}
	return nil
}

// printStructured prints v as -o json (indented) or -o yaml. A plan's v
// carries the exit code the command ends with beside the plan's fields, so
// that a script reads both from one document.
func printStructured(out io.Writer, format string, v any) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	b, err := yaml.Marshal(v)
	if err == nil {
		_, err = out.Write(b)
	}
	return err
}

// writePools writes each new pool's manifest to dir/<name>.yaml, or to out
// with "-".
func writePools(dir string, plan *winupgrade.Plan, out io.Writer) error {
	if dir == "" {
		return nil
	}
	if dir == "-" {
		for _, p := range plan.Pools {
			if _, err := io.WriteString(out, p.Manifest); err != nil {
				return err
			}
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--write-to %s: %w", dir, err)
	}
	for _, p := range plan.Pools {
		path := filepath.Join(dir, p.NewName+".yaml")
		if err := os.WriteFile(path, []byte(p.Manifest), 0o644); err != nil {
			return fmt.Errorf("--write-to %s: %w", dir, err)
		}
	}
	return nil
}
