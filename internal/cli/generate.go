package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/scheme"
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
		outputFile string
	)
	cmd := &cobra.Command{
		Use:   "cluster NAME",
		Short: "Print the manifests of a mixed Linux/Windows cluster",
		Long: `Print the Cluster API manifests of a cluster of one of winkube's flavors:

  default              Linux control plane and Linux workers
  windows              plus Windows workers (containerd), Calico VXLAN and
                       kube-proxy for Windows as HostProcess DaemonSets
  machinepool-windows  the same with the Windows workers in a scale set
  windows-flannel      Flannel VXLAN (VNI 4096, port 4789, MTU 1400/1350)
  windows-hostgw       Flannel host-gw (l2bridge) where routes can be set
  windows-dockershim   Docker EE on Windows, Kubernetes v1.23 and older only

With --clusterctl-template the flavor is printed with ${VARIABLE}
placeholders for 'clusterctl generate cluster', and the variables it needs.`,
		Example: `  winkube generate cluster demo --flavor windows --kubernetes-version v1.36.3 \
    --location westeurope --subscription-id $AZURE_SUBSCRIPTION_ID --ssh-public-key ~/.ssh/id_ed25519.pub`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if outputFile != "" {
				f, err := os.Create(outputFile)
				if err != nil {
					return err
				}
				defer f.Close()
				out = f
			}
			if clusterctl {
				data, vars, err := flavors.Template(scheme.New(), flavor, winVersion, o.WindowsTaint)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "# clusterctl template of winkube flavor %q. Variables: %s\n", flavor, strings.Join(vars, ", "))
				_, err = out.Write(data)
				return err
			}
			if len(args) == 1 {
				o.ClusterName = args[0]
			}
			if keyFile != "" {
				key, err := os.ReadFile(keyFile)
				if err != nil {
					return fmt.Errorf("--ssh-public-key: %w", err)
				}
				o.SSHPublicKey = strings.TrimSpace(string(key))
				if strings.Contains(o.SSHPublicKey, "PRIVATE KEY") {
					return errors.New("--ssh-public-key names a private key: give the .pub file")
				}
			}
			o.WindowsVersion = infrav1.WindowsServerVersion(winVersion)
			switch winVersion {
			case "", "2019", "2022", "2025":
			default:
				return fmt.Errorf("--windows-version %q: use 2019, 2022 or 2025", winVersion)
			}
			objs, err := flavors.Generate(flavor, o)
			if err != nil {
				return err
			}
			data, err := flavors.YAML(scheme.New(), objs)
			if err != nil {
				return err
			}
			_, err = out.Write(data)
			return err
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
	f.StringVar(&o.ControlPlaneVMSize, "control-plane-vm-size", "Standard_D2s_v3", "VM size of control-plane machines")
	f.StringVar(&o.NodeVMSize, "node-vm-size", "Standard_D4s_v3", "VM size of workers")
	f.BoolVar(&o.WindowsTaint, "windows-taint", false, "taint Windows nodes os=windows:NoSchedule (the add-ons tolerate it)")
	f.BoolVar(&clusterctl, "clusterctl-template", false, "print a clusterctl template with ${VARIABLE} placeholders instead")
	f.StringVarP(&outputFile, "output", "o", "", "write to this file instead of standard output")
	return cmd
}
