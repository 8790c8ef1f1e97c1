package cli

import (
	"errors"
	"fmt"
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

func newGenerateClusterCommand() *cobra.Command {
	var (
		o          flavors.Options
		flavor     string
		keyFile    string
		winVersion string
		clusterctl bool
		output     string
		admission  bool
		writeTo    string
	)
	cmd := &cobra.Command{
		Use:   "cluster NAME",
		Short: "Print the manifests of a mixed Linux/Windows cluster",
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

Before anything is written, the objects go through the same defaulting and
validation as winkube's admission webhooks in a management cluster, so a value
the cluster (or Azure) would refuse is refused here, naming the flag to change.
NAME must be a DNS-1123 label (lower-case letters, digits and '-', at most 63),
as clusterctl requires.`,
		Example: `  winkube generate cluster demo --flavor windows --kubernetes-version v1.36.3 \
    --location westeurope --subscription-id $AZURE_SUBSCRIPTION_ID --ssh-public-key ~/.ssh/id_ed25519.pub`,
		Args: atMostOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(cmd, output, "yaml", "json"); err != nil {
				return err
			}
			switch winVersion {
			case "", "2019", "2022", "2025":
			default:
				return badInputf(cmd, "--windows-version %q: use 2019, 2022 or 2025", winVersion)
			}
			var data []byte
			if clusterctl {
				if len(args) == 1 {
					return badInputf(cmd, "--clusterctl-template prints a template whose name is ${CLUSTER_NAME}: leave out NAME %q", args[0])
				}
				tmpl, vars, err := flavors.Template(scheme.New(), flavor, winVersion, o.WindowsTaint)
				if err != nil {
					return badInput(cmd, err)
				}
				if output == "json" {
					return badInputf(cmd, "--output json: a clusterctl template is YAML; leave out --output")
				}
				data = append([]byte(fmt.Sprintf("# clusterctl template of winkube flavor %q. Variables: %s\n", flavor, strings.Join(vars, ", "))), tmpl...)
			} else {
				if len(args) == 1 {
					o.ClusterName = args[0]
				}
				if keyFile != "" {
					key, err := os.ReadFile(keyFile)
					if err != nil {
						return badInputf(cmd, "--ssh-public-key: %w", err)
					}
					o.SSHPublicKey = strings.TrimSpace(string(key))
					if strings.Contains(o.SSHPublicKey, "PRIVATE KEY") {
						return badInputf(cmd, "--ssh-public-key %s names a private key: give the .pub file", keyFile)
					}
				}
				o.WindowsVersion = infrav1.WindowsServerVersion(winVersion)
				o.NoAdmission = !admission
				objs, err := buildObjects(cmd, flavor, o)
				if err != nil {
					return err
				}
				if data, err = render(objs, output); err != nil {
					return err
				}
			}
			return writeOut(cmd, writeTo, data)
		},
	}
	f := cmd.Flags()
	f.StringVar(&flavor, "flavor", flavors.Windows, "one of "+strings.Join(flavors.Names(), ", "))
	f.StringVar(&o.KubernetesVersion, "kubernetes-version", "", "Kubernetes version, such as v1.36.3 (required)")
	f.StringVar(&winVersion, "windows-version", "2022", "Windows Server release of the Windows nodes: 2019, 2022 or 2025")
	f.Int32Var(&o.ControlPlaneNodes, "control-plane-nodes", 1, "control-plane machines (odd)")
	f.Int32Var(&o.LinuxNodes, "linux-nodes", 1, "Linux worker machines")
	f.Int32Var(&o.WindowsNodes, "windows-nodes", 2, "Windows worker machines")
	f.StringVar(&o.Location, "location", "", "Azure region, such as westeurope (required)")
	f.StringVar(&o.SubscriptionID, "subscription-id", os.Getenv("AZURE_SUBSCRIPTION_ID"), "Azure subscription (required; default $AZURE_SUBSCRIPTION_ID)")
	f.StringVar(&keyFile, "ssh-public-key", "", "OpenSSH public key file for user capi on every node (required)")
	f.StringVar(&o.Namespace, "namespace", "default", "namespace of the objects")
	f.StringVar(&o.FlannelWindowsImage, "flannel-windows-image", "", "flannel HostProcess image for Windows nodes you build (required by the flannel flavors: none is published)")
	f.StringVar(&o.KubeProxyWindowsImage, "kube-proxy-windows-image", "", "kube-proxy HostProcess image for Windows nodes of flannel clusters you build (required by the flannel flavors)")
	f.StringVar(&o.ControlPlaneVMSize, "control-plane-vm-size", "Standard_D2s_v3", "VM size of control-plane machines")
	f.StringVar(&o.NodeVMSize, "node-vm-size", "Standard_D4s_v3", "VM size of workers")
	f.BoolVar(&o.WindowsTaint, "windows-taint", false, "taint Windows nodes os=windows:NoSchedule (the add-ons tolerate it)")
	f.BoolVar(&o.MetricsServer, "metrics-server", false, "add the metrics-server add-on (the Cluster label metrics-server=enabled and its ClusterResourceSet); in a --clusterctl-template it is the variable METRICS_SERVER=enabled")
	f.BoolVar(&o.AzureDiskCSI, "azuredisk-csi", false, "add the Azure Disk CSI driver add-on (the Cluster label azuredisk-csi=true and its ClusterResourceSet: the driver's Helm chart 1.34.5 as CAPZ installs it, and the StorageClass managed-csi); in a --clusterctl-template it is the variable AZUREDISK_CSI=true")
	f.BoolVar(&admission, "admission", true, "deploy winkube's workload admission in the cluster (the Cluster label winkube.dev/admission=enabled and its ClusterResourceSet); --admission=false leaves it out")
	f.BoolVar(&clusterctl, "clusterctl-template", false, "print a clusterctl template with ${VARIABLE} placeholders instead")
	outputFlag(cmd, &output, "yaml", "yaml", "json")
	f.StringVar(&writeTo, "write-to", "", "write to this file instead of standard output (as clusterctl generate cluster --write-to)")
	return cmd
}

// buildObjects builds a flavor's objects and runs them through the
// webhooks' defaulting and validation, as the management cluster would:
// the one validation path of generate, up and bench.
func buildObjects(cmd *cobra.Command, flavor string, o flavors.Options) ([]client.Object, error) {
	objs, err := flavors.Generate(flavor, o)
	if err != nil {
		return nil, badInput(cmd, err)
	}
	if err := webhooks.Admit(cmd.Context(), scheme.New(), objs); err != nil {
		return nil, objectProblems(cmd, err, flagOfField)
	}
	return objs, nil
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

// writeOut writes data to --write-to, refusing to overwrite a file, or to
// standard output.
func writeOut(cmd *cobra.Command, path string, data []byte) error {
	if path == "" {
		_, err := cmd.OutOrStdout().Write(data)
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return badInputf(cmd, "--write-to %s: the file exists; remove it or name another", path)
	}
	if err != nil {
		return badInputf(cmd, "--write-to: %w", err)
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
