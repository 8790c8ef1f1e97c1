package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/webhooks"
)

func newGenerateCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "generate", Short: "Generate cluster manifests"}
	cmd.AddCommand(newGenerateClusterCommand())
	return cmd
}

// generateClusterOptions is `winkube generate cluster`'s input: the cobra
// command only fills it from flags and arguments, then calls Validate and
// Run, as clusterctl keeps a command's flags in cmd/clusterctl/cmd
// (generate_cluster.go) and its work in cmd/clusterctl/client
// (kubernetes-sigs/cluster-api 8961830d).
type generateClusterOptions struct {
	// Name is the cluster's NAME argument ("" for none).
	Name string
	// Cluster is what the flavor is generated from; its SSHPublicKey,
	// WindowsVersion, ClusterName and NoAdmission come from the fields
	// below.
	Cluster flavors.Options
	Flavor  string
	// SSHPublicKeyFile is the OpenSSH public key file for user capi.
	SSHPublicKeyFile string
	// WindowsVersion is 2019, 2022, 2025 or "".
	WindowsVersion string
	// ClusterctlTemplate prints the flavor with ${VARIABLE} placeholders.
	ClusterctlTemplate bool
	// Output is yaml or json; WriteTo a file to create instead of out.
	Output, WriteTo string
	// Admission deploys winkube's workload admission in the cluster.
	Admission bool
}

// Validate refuses input that is wrong whatever the files and the
// flavor hold, naming the flag to change; Run refuses the rest.
func (g *generateClusterOptions) Validate() error {
	if err := checkOutput(nil, g.Output, "yaml", "json"); err != nil {
		return err
	}
	switch g.WindowsVersion {
	case "", "2019", "2022", "2025":
	default:
		return badInputf(nil, "--windows-version %q: use 2019, 2022 or 2025", g.WindowsVersion)
	}
	if g.ClusterctlTemplate && g.Name != "" {
		return badInputf(nil, "--clusterctl-template prints a template whose name is ${CLUSTER_NAME}: leave out NAME %q", g.Name)
	}
	if g.ClusterctlTemplate && g.Output == "json" {
		return badInputf(nil, "--output json: a clusterctl template is YAML; leave out --output")
	}
	if g.Cluster.CalicoTyphaReplicas < 1 {
		return badInputf(nil, "--calico-typha-replicas %d: every Felix finds its Typha through the calico-typha Service; use 1 or more", g.Cluster.CalicoTyphaReplicas)
	}
	return nil
}

// Run writes the manifests (or the clusterctl template) to WriteTo, or to
// out, after the webhooks' defaulting and validation.
func (g *generateClusterOptions) Run(ctx context.Context, out io.Writer) error {
	var data []byte
	if g.ClusterctlTemplate {
		tmpl, vars, err := flavors.Template(scheme.New(), g.Flavor, g.WindowsVersion, g.Cluster.WindowsTaint)
		if err != nil {
			return badInput(nil, err)
		}
		data = append([]byte(fmt.Sprintf("# clusterctl template of winkube flavor %q. Variables: %s\n", g.Flavor, strings.Join(vars, ", "))), tmpl...)
		return writeOut(out, g.WriteTo, data)
	}
	o := g.Cluster
	if g.Name != "" {
		o.ClusterName = g.Name
	}
	if g.SSHPublicKeyFile != "" {
		key, err := os.ReadFile(g.SSHPublicKeyFile)
		if err != nil {
			return badInputf(nil, "--ssh-public-key: %w", err)
		}
		o.SSHPublicKey = strings.TrimSpace(string(key))
		if strings.Contains(o.SSHPublicKey, "PRIVATE KEY") {
			return badInputf(nil, "--ssh-public-key %s names a private key: give the .pub file", g.SSHPublicKeyFile)
		}
	}
	o.WindowsVersion = infrav1.WindowsServerVersion(g.WindowsVersion)
	o.NoAdmission = !g.Admission
	objs, err := admitFlavor(ctx, g.Flavor, o)
	if err != nil {
		return err
	}
	if data, err = render(objs, g.Output); err != nil {
		return err
	}
	return writeOut(out, g.WriteTo, data)
}

func newGenerateClusterCommand() *cobra.Command {
	g := &generateClusterOptions{}
	cmd := &cobra.Command{
		Use:   "cluster NAME",
		Short: "Print the Cluster API manifests of a mixed Linux/Windows cluster",
		Long: `Print the Cluster API manifests of a cluster of one of winkube's flavors:

  default              Linux control plane and Linux workers
  windows              plus Windows workers (containerd), Calico VXLAN (v3.30.7,
                       as the tigera operator renders it for Windows) and
                       kube-proxy for Windows as HostProcess DaemonSets
  machinepool-windows  the same with the Windows workers in a scale set
  windows-flannel      Flannel VXLAN (VNI 4096, port 4789, MTU 1400/1350)
  windows-hostgw       Flannel host-gw (l2bridge) where routes can be set

windows-dockershim is refused: Docker cannot run the HostProcess add-ons and
the kubelet lost dockershim in Kubernetes v1.24; use windows (containerd).

No flannel image for Windows is published any more (sig-windows-tools removed
its HostProcess flannel in April 2025, and kube-proxy's -flannel-hostprocess
tags are no longer built): the flannel flavors need the images you build,
named with --flannel-windows-image and --kube-proxy-windows-image (in a
clusterctl template, ${FLANNEL_WINDOWS_IMAGE} and ${KUBE_PROXY_WINDOWS_IMAGE}).
Every image the other flavors use is published: the README's "Add-on images"
table names each with the source that shows it.

Every machine template says identity: SystemAssigned: the cloud provider on
the nodes (azure.json's useManagedIdentityExtension) authenticates as the VM's
managed identity, which winkube grants Contributor on the cluster's resource
group. For that the manager's principal needs User Access Administrator (or
Owner) on that group besides Contributor; without it the machines say
RoleAssignmentFailed. A cluster with an AzureClusterIdentity of type
ServicePrincipal (as 'winkube up' makes) uses its secret instead.

With --clusterctl-template the flavor is printed with ${VARIABLE}
placeholders for 'clusterctl generate cluster', and the variables it needs.

Calico runs with Typha, from Calico's manifests/calico-typha.yaml: Felix
gets its data from Typha rather than from the API server. Its replicas are
--calico-typha-replicas (in a template ${CALICO_TYPHA_REPLICAS:=1}); the
manifest ships 1 and has no autoscaler, while the tigera operator CAPZ
installs runs 1 Typha for up to 2 nodes, 2 for 3-4, then one per 200 nodes
plus one, at least 3 ('winkube up' sets that for its world).

Before anything is written, the objects go through the same defaulting and
validation as winkube's admission webhooks in a management cluster, so a value
the cluster (or Azure) would refuse is refused here, naming the flag to change.
NAME must be a DNS-1123 label (lower-case letters, digits and '-', at most 63),
as clusterctl requires.`,
		Example: `  winkube generate cluster demo --flavor windows --kubernetes-version v1.36.3 \
    --location westeurope --subscription-id $AZURE_SUBSCRIPTION_ID --ssh-public-key ~/.ssh/id_ed25519.pub`,
		Args: atMostOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				g.Name = args[0]
			}
			return validThenRun(cmd, g, func() error { return g.Run(cmd.Context(), cmd.OutOrStdout()) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&g.Flavor, "flavor", flavors.Windows, "one of "+strings.Join(flavors.Names(), ", "))
	f.StringVar(&g.Cluster.KubernetesVersion, "kubernetes-version", "", "Kubernetes version, such as v1.36.3 (required)")
	f.StringVar(&g.WindowsVersion, "windows-version", "2022", "Windows Server release of the Windows nodes: 2019, 2022 or 2025")
	f.Int32Var(&g.Cluster.ControlPlaneNodes, "control-plane-nodes", 1, "control-plane machines (odd)")
	f.Int32Var(&g.Cluster.LinuxNodes, "linux-nodes", 1, "Linux worker machines")
	f.Int32Var(&g.Cluster.WindowsNodes, "windows-nodes", 2, "Windows worker machines")
	f.StringVar(&g.Cluster.Location, "location", "", "Azure region, such as westeurope (required)")
	f.StringVar(&g.Cluster.SubscriptionID, "subscription-id", os.Getenv("AZURE_SUBSCRIPTION_ID"), "Azure subscription (required; default $AZURE_SUBSCRIPTION_ID)")
	f.StringVar(&g.SSHPublicKeyFile, "ssh-public-key", "", "OpenSSH public key file for user capi on every node (required)")
	f.StringVar(&g.Cluster.Namespace, "namespace", "default", "namespace of the objects")
	f.StringVar(&g.Cluster.FlannelWindowsImage, "flannel-windows-image", "", "flannel HostProcess image for Windows nodes you build (required by the flannel flavors: none is published)")
	f.StringVar(&g.Cluster.KubeProxyWindowsImage, "kube-proxy-windows-image", "", "kube-proxy HostProcess image for Windows nodes of flannel clusters you build (required by the flannel flavors)")
	f.StringVar(&g.Cluster.ControlPlaneVMSize, "control-plane-vm-size", "Standard_D2s_v3", "VM size of control-plane machines")
	f.StringVar(&g.Cluster.NodeVMSize, "node-vm-size", "Standard_D4s_v3", "VM size of workers")
	f.BoolVar(&g.Cluster.WindowsTaint, "windows-taint", false, "taint Windows nodes os=windows:NoSchedule (the add-ons tolerate it)")
	f.BoolVar(&g.Cluster.MetricsServer, "metrics-server", false, "add the metrics-server add-on (the Cluster label metrics-server=enabled and its ClusterResourceSet); in a --clusterctl-template it is the variable METRICS_SERVER=enabled")
	f.BoolVar(&g.Cluster.AzureDiskCSI, "azuredisk-csi", false, "add the Azure Disk CSI driver add-on (the Cluster label azuredisk-csi=true and its ClusterResourceSet: the driver's Helm chart 1.34.5 as CAPZ installs it, and the StorageClass managed-csi); in a --clusterctl-template it is the variable AZUREDISK_CSI=true")
	f.Int32Var(&g.Cluster.CalicoTyphaReplicas, "calico-typha-replicas", flavors.DefaultTyphaReplicas, "replicas of Calico's Typha in the Calico flavors (see above); in a --clusterctl-template it is the variable CALICO_TYPHA_REPLICAS")
	f.BoolVar(&g.Admission, "admission", true, "deploy winkube's workload admission in the cluster (the Cluster label winkube.dev/admission=enabled and its ClusterResourceSet); --admission=false leaves it out")
	f.BoolVar(&g.ClusterctlTemplate, "clusterctl-template", false, "print a clusterctl template with ${VARIABLE} placeholders instead")
	outputFlag(cmd, &g.Output, "yaml", "yaml", "json")
	f.StringVar(&g.WriteTo, "write-to", "", "write to this file instead of standard output (as clusterctl generate cluster --write-to)")
	return cmd
}

// admitFlavor builds a flavor's objects and runs them through the
// webhooks' defaulting and validation, as the management cluster would:
// the one validation path of generate, up and bench.
func admitFlavor(ctx context.Context, flavor string, o flavors.Options) ([]client.Object, error) {
	objs, err := flavors.Generate(flavor, o)
	if err != nil {
		return nil, badInput(nil, err)
	}
	if err := webhooks.Admit(ctx, scheme.New(), objs); err != nil {
		return nil, objectProblems(nil, err, flagOfField)
	}
	return objs, nil
}

// withHelp points a usage error without a command at cmd's --help.
func withHelp(cmd *cobra.Command, err error) error {
	var u *UsageError
	if errors.As(err, &u) && u.Help == "" {
		u.Help = cmd.CommandPath()
	}
	return err
}

// validThenRun is a command's RunE once its options hold the flags and
// arguments: options that do not validate, and a run that fails for bad
// input, are reported with the command's usage hint (exit 2).
func validThenRun(cmd *cobra.Command, o interface{ Validate() error }, run func() error) error {
	if err := o.Validate(); err != nil {
		return withHelp(cmd, err)
	}
	return withHelp(cmd, run())
}

// flagOfField names the flag of generate/up that sets a generated field.
func flagOfField(p webhooks.Problem) string {
	switch {
	case p.Field == "metadata.name":
		return "NAME"
	case p.Field == "spec.location":
		return "--location"
	case p.Field == "spec.subscriptionID":
		return "--subscription-id"
	case p.Field == "spec.resourceGroup":
		return "NAME"
	case strings.HasSuffix(p.Field, ".vmSize") && strings.HasSuffix(p.Name, "-control-plane"):
		return "--control-plane-vm-size"
	case strings.HasSuffix(p.Field, ".vmSize"):
		return "--node-vm-size"
	case strings.HasSuffix(p.Field, ".sshPublicKey"):
		return "--ssh-public-key"
	case strings.HasSuffix(p.Field, ".windowsServerVersion"):
		return "--windows-version"
	}
	return ""
}

func render(objs []client.Object, format string) ([]byte, error) {
	if format == "json" {
		return flavors.JSON(scheme.New(), objs)
	}
	return flavors.YAML(scheme.New(), objs)
}

// writeOut writes data to path, refusing to overwrite a file, or to out
// when path is "".
func writeOut(out io.Writer, path string, data []byte) error {
	if path == "" {
		_, err := out.Write(data)
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return badInputf(nil, "--write-to %s: the file exists; remove it or name another", path)
	}
	if err != nil {
		return badInputf(nil, "--write-to: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// atMostOneName takes an optional NAME.
func atMostOneName(cmd *cobra.Command, args []string) error {
	if len(args) > 1 {
		return fmt.Errorf("one NAME only: %s %s (drop %s)", cmd.CommandPath(), args[0], strings.Join(args[1:], " "))
	}
	return nil
}
