package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/upgrade"
)

// planUpgradeOptions is `winkube plan upgrade`'s input, split as plan
// windows-upgrade's is; internal/upgrade plans and rolls.
type planUpgradeOptions struct {
	doctorOptions
	catalog imagesOptions
	to      string
	writeTo string
	apply   bool
}

func newPlanUpgradeCommand() *cobra.Command {
	o := &planUpgradeOptions{}
	cmd := &cobra.Command{
		Use:   "upgrade --to vX.Y.Z",
		Short: "Plan (and with --apply, run) a Kubernetes upgrade of a mixed cluster, in order",
		Long: `Checks what would go wrong upgrading the cluster to a Kubernetes version, and
writes the changes in the order they must be made: the KubeadmControlPlane's
version, then each Linux pool's, then each Windows pool's (with a new
AzureMachineTemplate where the template names a community-gallery image of
the old version or no Windows Server release: the plan pins the release the
pool's nodes run).

The checks:
  - version skew: kubeadm upgrades one minor at a time and never down; a
    kubelet may be at most three minors older than the API server;
  - a reference image of the target for Linux and for each Windows Server
    release in use, in the cloud's image catalog (--arm-endpoint; by default
    an emulator's, the local world's catalog);
  - the version-bound add-ons' images for the target (kube-proxy for
    Windows, the cloud controller and node managers) and the Kubernetes
    range of Calico, the Azure Disk CSI driver and metrics-server;
  - Windows Server releases: unpinned templates (pinned by the plan; an
    error when a pool's nodes run two releases), a release no longer
    supported on the target, nodes whose release the rollout would change;
  - PodDisruptionBudgets that allow no disruption, and pools that set no
    nodeDrainTimeout.

--apply makes the changes and waits for each (the control plane Ready on
the target, then each pool's machines), printing progress; it stops at the
first step that fails, and run again it continues where it stopped. The
cluster's version-bound add-ons follow its control plane by themselves once
it has rolled out (the provider's manager rewrites their ClusterResourceSet
ConfigMaps).

Exit status: 0 when nothing is wrong, 1 with warnings, 2 with errors (as doctor).`,
		Example: `  winkube plan upgrade --to v1.36.3 --local winkube
  winkube plan upgrade --to v1.36.3 --local winkube --apply
  winkube plan upgrade --to v1.36.3 --management-kubeconfig ~/.kube/config --cluster demo -o json`,
		Args: cobra.NoArgs,
		RunE: optionsRunE(&o.doctorOptions, o),
	}
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "the Kubernetes version to upgrade to, vX.Y.Z (required)")
	f.BoolVar(&o.apply, "apply", false, "make the changes in order, waiting for each to roll out")
	f.StringVar(&o.writeTo, "write-to", "", "write each step's changes to DIR/<n>-<kind>-<name>.yaml, or print them with -")
	f.StringVar(&o.catalog.armEndpoint, "arm-endpoint", "", "Azure Resource Manager endpoint whose image catalog is read (default: an emulator started for the command, which serves the local world's catalog)")
	f.StringVar(&o.catalog.armToken, "arm-token", os.Getenv("WINKUBE_ARM_TOKEN"), "bearer token for --arm-endpoint (default $WINKUBE_ARM_TOKEN)")
	f.StringVar(&o.catalog.armCAFile, "arm-ca-file", "", "CA certificate that --arm-endpoint's TLS certificate chains to")
	f.StringVar(&o.catalog.subscription, "subscription-id", "00000000-0000-0000-0000-000000000000", "subscription whose view of the catalog is read")
	o.clusterFlags(cmd, "whose Cluster API objects are changed (required, or --local)", "upgrade")
	outputFlag(cmd, &o.output, "text", "text", "json", "yaml")
	return cmd
}

// Validate refuses, before any cluster is asked, a version that is not
// one, a format plan cannot write, output that would mix, and two local
// worlds.
func (o *planUpgradeOptions) Validate() error {
	if err := checkOutput(nil, o.output, "text", "json", "yaml"); err != nil {
		return err
	}
	if o.to == "" {
		return badInputf(o.cmd, "--to is required: the Kubernetes version to upgrade to, such as v1.36.3")
	}
	if _, err := upgrade.ParseTarget(o.to); err != nil {
		return badInputf(o.cmd, "%v", err)
	}
	if o.apply && o.output != "text" {
		return badInputf(o.cmd, "--apply prints its progress as text: drop -o %s (plan first with -o %s, then apply)", o.output, o.output)
	}
	if o.writeTo == "-" && o.output != "text" {
		return badInputf(o.cmd, "--write-to - prints the changes' YAML, which would mix with -o %s: write them to a directory (--write-to DIR)", o.output)
	}
	return o.oneWorld()
}

// Run plans the upgrade and writes it on out, or with --apply makes the
// changes in order; what the plan finds comes back as its ExitStatus.
func (o *planUpgradeOptions) Run(ctx context.Context, out io.Writer) error {
	if err := o.resolveLocal(); err != nil {
		return err
	}
	if o.mgmtKubeconfig == "" {
		return badInputf(o.cmd, "an upgrade changes the cluster's Cluster API objects: give the management cluster (--management-kubeconfig, or --local NAME)")
	}
	c, err := o.connect(ctx)
	if err != nil {
		return err
	}
	lister, closeCatalog, err := o.catalog.armCatalog()
	if err != nil {
		return fmt.Errorf("the image catalog: %w", err)
	}
	defer closeCatalog()
	opts := upgrade.Options{Management: c.management, Workload: c.workload, Namespace: o.namespace, ClusterName: c.cluster, Target: o.to, Images: lister, Progress: out}
	if err := opts.Validate(); err != nil {
		return badInputf(o.cmd, "%v", err)
	}
	plan, err := upgrade.Build(ctx, opts)
	if err != nil {
		return err
	}
	if err := writeUpgrade(o, plan, out); err != nil {
		return err
	}
	code := plan.ExitCode()
	if !o.apply || code == 2 {
		if code != 0 {
			return ExitStatus(code)
		}
		return nil
	}
	_, err = upgrade.Run(ctx, opts)
	return err
}

func writeUpgrade(o *planUpgradeOptions, plan *upgrade.Plan, out io.Writer) error {
	switch o.writeTo {
	case "":
	case "-":
		for _, st := range plan.Steps {
			if _, err := io.WriteString(out, st.Manifest+"---\n"); err != nil {
				return err
			}
		}
	default:
		if err := os.MkdirAll(o.writeTo, 0o755); err != nil {
			return fmt.Errorf("--write-to %s: %w", o.writeTo, err)
		}
		for i, st := range plan.Steps {
			path := filepath.Join(o.writeTo, fmt.Sprintf("%d-%s-%s.yaml", i+1, strings.ToLower(st.Kind), st.Name))
			if err := os.WriteFile(path, []byte(st.Manifest), 0o644); err != nil {
				return fmt.Errorf("--write-to %s: %w", o.writeTo, err)
			}
		}
	}
	type withExit struct {
		*upgrade.Plan
		ExitCode int `json:"exitCode"`
	}
	if o.output == "json" || o.output == "yaml" {
		return printStructured(out, o.output, withExit{plan, plan.ExitCode()})
	}
	if err := plan.WriteText(out); err != nil {
		return err
	}
	if o.writeTo == "" && !o.apply {
		_, err := fmt.Fprintln(out, "Write the changes with --write-to DIR (or - to print them), or make them in order with --apply.")
		return err
	}
	return nil
}
