package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/byovm"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/naming"
	"github.com/winkube/winkube/internal/nodessh"
)

// machineOptions are the flags of 'winkube machine': the cluster whose
// network and identity a plain machine uses.
type machineOptions struct {
	access accessOptions
	cmd    *cobra.Command
}

func (o *machineOptions) addFlags(cmd *cobra.Command) {
	o.cmd, o.access.cmd = cmd, cmd
	f := cmd.Flags()
	f.StringVar(&o.access.kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.access.context, "context", "", "kubeconfig context to use")
	f.StringVarP(&o.access.namespace, "namespace", "n", "", "namespace of the AzureCluster (default: the context's, or default)")
	f.StringVar(&o.access.cluster, "cluster", "", "the AzureCluster whose resource group, node subnet and identity the machine uses (default: the namespace's only one)")
	f.StringVar(&o.access.local, "local", "", "use the local world NAME made by 'winkube up NAME' (its kubeconfig, Azure and SSH key in ~/.winkube/NAME)")
	f.StringVar(&o.access.stateDir, "state-dir", "", "use the local world whose state is in this directory (as --local)")
	f.BoolVar(&o.access.useMyAzureLogin, "use-my-azure-login", false, useMyAzureLoginUsage)
}

// cluster finds the AzureCluster and Azure as its identity reaches it.
func (o *machineOptions) cluster(ctx context.Context) (*infrav1.AzureCluster, *cloud.Services, error) {
	if err := o.access.resolveLocal(); err != nil {
		return nil, nil, err
	}
	c, ns, err := o.access.client()
	if err != nil {
		return nil, nil, err
	}
	list := &infrav1.AzureClusterList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, nil, fmt.Errorf("listing AzureClusters in namespace %s: %w", ns, err)
	}
	var names []string
	var ac *infrav1.AzureCluster
	for i := range list.Items {
		names = append(names, list.Items[i].Name)
		if list.Items[i].Name == o.access.cluster || o.access.cluster == "" && len(list.Items) == 1 {
			ac = &list.Items[i]
		}
	}
	switch {
	case ac == nil && o.access.cluster != "":
		return nil, nil, badInputf(o.cmd, "--cluster %s: no AzureCluster of that name in namespace %s (there are: %s)", o.access.cluster, ns, strings.Join(names, ", "))
	case ac == nil && len(names) == 0:
		return nil, nil, badInputf(o.cmd, "namespace %s has no AzureCluster: pass --namespace, or make a cluster first (winkube up)", ns)
	case ac == nil:
		return nil, nil, badInputf(o.cmd, "namespace %s has several AzureClusters (%s): pass --cluster", ns, strings.Join(names, ", "))
	}
	svc, err := clusterServices(ctx, c, ac, o.access.stateDir, nil, o.access.useMyAzureLogin)
	return ac, svc, err
}

func newMachineCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "machine",
		Short: "Make or remove a plain Windows Server VM that no Cluster API object owns, to join with 'winkube node join'",
	}
	cmd.AddCommand(newMachineCreateCommand(), newMachineDeleteCommand())
	return cmd
}

// machineCreateOptions is `winkube machine create`'s input, split as
// generate cluster's is (clusterctl's cmd/ and client/,
// kubernetes-sigs/cluster-api cmd/clusterctl/cmd/generate_cluster.go
// @8961830d); internal/byovm makes the machine.
type machineCreateOptions struct {
	machineOptions
	// Name is the NAME argument: the VM's and its computer's name.
	Name string
	// Windows is 2019, 2022 or 2025.
	Windows string
	// User is the SSH user to create, SSHPublicKeyFile its key ("" for
	// the local world's), Size the VM size ("" for byovm.DefaultSize).
	User, SSHPublicKeyFile, Size string
}

// Validate refuses what no cluster would change, naming the flag or
// argument, before the management cluster is asked.
func (o *machineCreateOptions) Validate() error {
	if _, ok := byovm.Images[infrav1.WindowsServerVersion(o.Windows)]; !ok {
		return badInputf(nil, "--windows %q: use 2019, 2022 or 2025", o.Windows)
	}
	if len(o.Name) > naming.MaxWindowsComputerName {
		return badInputf(nil, "NAME %q has %d characters: a Windows computer name has at most %d (NetBIOS); choose a shorter one", o.Name, len(o.Name), naming.MaxWindowsComputerName)
	}
	if strings.TrimSpace(o.User) == "" {
		return badInputf(nil, "--user %q: name the SSH user to create, such as %s", o.User, nodessh.DefaultUser)
	}
	return nil
}

// Run makes the VM in the cluster's node subnet, printing its name and
// addresses on out and the progress on errOut.
func (o *machineCreateOptions) Run(ctx context.Context, out, errOut io.Writer) error {
	spec := byovm.Spec{Name: o.Name, WindowsVersion: infrav1.WindowsServerVersion(o.Windows), User: o.User, Size: o.Size}
	if err := o.access.resolveLocal(); err != nil {
		return err
	}
	keyFile := o.SSHPublicKeyFile
	if keyFile == "" && o.access.stateDir != "" {
		keyFile = filepath.Join(o.access.stateDir, localworld.SSHKeyFile+".pub")
	}
	if keyFile == "" {
		return badInputf(nil, "pass --ssh-public-key FILE: the key the machine's SSH user logs in with")
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return badInput(nil, fmt.Errorf("--ssh-public-key: %w", err))
	}
	spec.SSHPublicKey = strings.TrimSpace(string(key))
	if strings.Contains(spec.SSHPublicKey, "PRIVATE KEY") {
		return badInputf(nil, "--ssh-public-key %s names a private key: give the .pub file", keyFile)
	}
	ac, svc, err := o.cluster(ctx)
	if err != nil {
		return err
	}
	spec.ResourceGroup, spec.Location = ac.Spec.ResourceGroup, ac.Spec.Location
	spec.SubnetID, err = nodeSubnetID(ac, svc.Subscription)
	if err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return badInput(nil, err)
	}
	m, err := byovm.Create(ctx, svc, spec, func(s string) { fmt.Fprintln(errOut, "winkube: "+s) })
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s\t%s\t%s\n", spec.Name, m.PublicIP, m.PrivateIP)
	fmt.Fprintf(errOut, "winkube: VM %s is up; SSH as %s to %s. Join it: winkube node join %s --ssh %s -l %s ...\n", spec.Name, o.User, m.PublicIP, spec.Name, m.PublicIP, o.User)
	return nil
}

func newMachineCreateCommand() *cobra.Command {
	o := &machineCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Make a Windows Server VM in a cluster's network, reachable by SSH",
		Long: `create makes a Windows Server VM as 'az vm create' would, in the resource
group, location and node subnet of an AzureCluster, acting as the cluster's
identity: a public IP, a NIC in the node subnet, and a VM from Microsoft's
Windows Server image (MicrosoftWindowsServer:WindowsServer) whose custom data
only creates an SSH user (an Administrator) with your public key. No Cluster API
object owns it: it is the machine 'winkube node join' prepares and joins, as a
team adds a Windows Server it built itself. NAME is its computer name (15
characters at most). The image has no Containers feature: the join script
installs it and asks for a restart.

When the AzureCluster has no identityRef, winkube would act with your own Azure
login where the AzureCluster's spec points (its subscription, resource group and
VNet), which whoever wrote that object chose: it refuses, naming them, unless you
pass --use-my-azure-login.`,
		Example: `  winkube machine create byo-win-1 --local winkube --windows 2022
  winkube node join byo-win-1 --local winkube --ssh <its public IP>`,
		Args: oneMachine,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	o.addFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.Windows, "windows", string(infrav1.WindowsServer2022), "Windows Server release: 2019, 2022 or 2025")
	f.StringVarP(&o.User, "user", "l", nodessh.DefaultUser, "the SSH user to create (an Administrator)")
	f.StringVar(&o.SSHPublicKeyFile, "ssh-public-key", "", "OpenSSH public key file the user logs in with (default: the local world's key)")
	f.StringVar(&o.Size, "size", "", "VM size (default "+byovm.DefaultSize+")")
	return cmd
}

func newMachineDeleteCommand() *cobra.Command {
	o := &machineOptions{}
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Remove a VM 'winkube machine create' made, with its NIC and public IP",
		Long: `delete removes the VM, NIC and public IP 'winkube machine create' made (it
refuses any other VM). Run 'winkube node leave' first when the machine joined a
cluster: the Node is not removed here. As for create, a cluster without an
identityRef needs --use-my-azure-login.`,
		Example: `  winkube machine delete byo-win-1 --local winkube`,
		Args:    oneMachine,
		RunE: func(cmd *cobra.Command, args []string) error {
			ac, svc, err := o.cluster(cmd.Context())
			if err != nil {
				return err
			}
			return byovm.Delete(cmd.Context(), svc, ac.Spec.ResourceGroup, args[0], func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), "winkube: "+s) })
		},
	}
	o.addFlags(cmd)
	return cmd
}

var oneMachine = oneArg("machine", "NAME")

// nodeSubnetID is the ARM ID of the cluster's node subnet.
func nodeSubnetID(ac *infrav1.AzureCluster, subscription string) (string, error) {
	vnet := ac.Spec.NetworkSpec.Vnet
	rg := vnet.ResourceGroup
	if rg == "" {
		rg = ac.Spec.ResourceGroup
	}
	for _, s := range ac.Spec.NetworkSpec.Subnets {
		if s.Role == infrav1.SubnetNode && vnet.Name != "" {
			return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Network/virtualNetworks/%s/subnets/%s", subscription, rg, vnet.Name, s.Name), nil
		}
	}
	return "", errors.New("AzureCluster " + ac.Name + " has no node subnet in its spec.networkSpec (its defaults are written by the webhook): is it a winkube AzureCluster?")
}
