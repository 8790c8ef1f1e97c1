package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/nodeaccess"
	"github.com/winkube/winkube/internal/nodejoin"
	"github.com/winkube/winkube/internal/nodessh"
)

func newNodeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Join a Windows Server machine winkube did not create to a cluster, or remove it",
	}
	cmd.AddCommand(newNodeJoinCommand(), newNodeLeaveCommand())
	return cmd
}

// machineSSH are the flags that reach a machine no Cluster API object
// describes: its own SSH address, no jump host.
type machineSSH struct {
	address, user, knownHosts string
	identities                []string
	noAgent                   bool
}

func (m *machineSSH) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.address, "ssh", "", "the machine's SSH address, HOST or HOST:PORT (Windows OpenSSH with PowerShell as its shell); without it the script is printed")
	f.StringVarP(&m.user, "user", "l", nodessh.DefaultUser, "user to log in as (an Administrator)")
	f.StringArrayVarP(&m.identities, "identity", "i", nil, "private key file to log in with (repeatable; default: ~/.ssh/id_ed25519, id_ecdsa, id_rsa, the local world's key and ssh-agent's keys)")
	f.StringVar(&m.knownHosts, "known-hosts", "", "known-hosts file (default ~/.winkube/known_hosts, or the local world's)")
	f.BoolVar(&m.noAgent, "no-agent", false, "do not offer ssh-agent's keys")
}

// validate refuses an --ssh address no machine could have and an empty
// --user.
func (m *machineSSH) validate() error {
	if m.address != "" {
		host, port, err := net.SplitHostPort(m.address)
		if err != nil {
			host, port = m.address, "22"
		}
		if host == "" || strings.ContainsAny(m.address, " /") || strings.Count(host, ":") == 1 {
			return badInputf(nil, "--ssh %q: give the machine's HOST or HOST:PORT, such as 10.1.0.5 or 10.1.0.5:22", m.address)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return badInputf(nil, "--ssh %q: the port must be from 1 to 65535, such as 10.1.0.5:22", m.address)
		}
	}
	if strings.TrimSpace(m.user) == "" {
		return badInputf(nil, "--user %q: name the user to log in as (an Administrator), such as %s", m.user, nodessh.DefaultUser)
	}
	return nil
}

// dial logs in to the machine directly.
func (m *machineSSH) dial(ctx context.Context, name, stateDir string, progress func(string)) (*nodessh.Conn, error) {
	addr := m.address
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "22")
	}
	host, _, _ := net.SplitHostPort(addr)
	var defaults []string
	if stateDir != "" {
		defaults = append(defaults, filepath.Join(stateDir, localworld.SSHKeyFile))
	}
	signers, err := nodessh.LoadSigners(m.identities, append(defaults, nodessh.DefaultKeyFiles()...), !m.noAgent)
	if err != nil {
		return nil, err
	}
	kh := m.knownHosts
	switch {
	case kh == "" && stateDir != "":
		kh = filepath.Join(stateDir, "known_hosts")
	case kh == "":
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, errors.New("no home directory for the known-hosts file: pass --known-hosts")
		}
		kh = filepath.Join(home, ".winkube", "known_hosts")
	}
	t := &nodeaccess.Target{Hostname: name, Address: host, OS: infrav1.Windows, Direct: true, JumpHosts: []string{addr}}
	return nodessh.Dial(ctx, t, nodessh.Options{User: m.user, Signers: signers, KnownHosts: &nodessh.KnownHosts{Path: kh}, Progress: progress})
}

// nodeJoinOptions is `winkube node join`'s input, split as generate
// cluster's is (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); internal/nodejoin
// checks the cluster, renders the script and runs it.
type nodeJoinOptions struct {
	// Join is what nodejoin.Run is given; its Node is the MACHINE argument
	// and its WindowsVersion is WindowsVersion's.
	Join           nodejoin.Options
	WindowsVersion string
	cluster        doctorOptions
	ssh            machineSSH
}

// Validate refuses what no cluster would change, naming the flag.
func (o *nodeJoinOptions) Validate() error {
	o.Join.WindowsVersion = infrav1.WindowsServerVersion(o.WindowsVersion)
	if err := o.Join.Validate(); err != nil {
		return badInput(nil, err)
	}
	if o.Join.Wait < 0 {
		return badInputf(nil, "--wait %s: want how long to wait for the node, such as 10m (0: do not wait)", o.Join.Wait)
	}
	return o.ssh.validate()
}

// Run joins the machine over --ssh, or prints the script on out; errOut
// gets the preflight and the progress.
func (o *nodeJoinOptions) Run(ctx context.Context, out, errOut io.Writer) error {
	if err := o.cluster.resolveLocal(); err != nil {
		return err
	}
	c, err := o.cluster.connect(ctx)
	if err != nil {
		return err
	}
	var runner nodejoin.Runner
	if o.ssh.address != "" && !o.Join.PrintScript {
		conn, err := o.ssh.dial(ctx, o.Join.Node, o.cluster.stateDir, func(s string) { fmt.Fprintln(errOut, "winkube: "+s) })
		if err != nil {
			return fmt.Errorf("logging in to %s: %w", o.ssh.address, err)
		}
		defer conn.Close()
		runner = conn
	}
	res, err := nodejoin.Run(ctx, c.workloadConfig, o.Join, runner, errOut)
	if err != nil {
		return err
	}
	if runner == nil {
		_, err = fmt.Fprint(out, res.Script)
	}
	return err
}

// nodeLeaveOptions is `winkube node leave`'s input; nodejoin.Leave does
// the work.
type nodeLeaveOptions struct {
	// Node is the NODE argument.
	Node         string
	DrainTimeout time.Duration
	cluster      doctorOptions
	ssh          machineSSH
}

// Validate refuses what no cluster would change, naming the flag.
func (o *nodeLeaveOptions) Validate() error {
	// A drain of no time evicts nothing: it fails once the node is
	// cordoned.
	if o.DrainTimeout <= 0 {
		return badInputf(nil, "--drain-timeout %s: want how long the node's pods may take to be evicted, such as 5m", o.DrainTimeout)
	}
	return o.ssh.validate()
}

// Run drains the node, resets the machine over --ssh and removes the
// node; errOut gets the progress.
func (o *nodeLeaveOptions) Run(ctx context.Context, errOut io.Writer) error {
	if err := o.cluster.resolveLocal(); err != nil {
		return err
	}
	c, err := o.cluster.connect(ctx)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.workloadConfig)
	if err != nil {
		return err
	}
	var runner nodejoin.Runner
	if o.ssh.address != "" {
		conn, err := o.ssh.dial(ctx, o.Node, o.cluster.stateDir, func(s string) { fmt.Fprintln(errOut, "winkube: "+s) })
		if err != nil {
			return fmt.Errorf("logging in to %s: %w", o.ssh.address, err)
		}
		defer conn.Close()
		runner = conn
	}
	return nodejoin.Leave(ctx, cs, strings.ToLower(o.Node), runner, o.DrainTimeout, errOut)
}

func newNodeJoinCommand() *cobra.Command {
	o := &nodeJoinOptions{}
	cmd := &cobra.Command{
		Use:   "join MACHINE",
		Short: "Prepare a Windows Server machine and join it to a kubeadm-based cluster",
		Long: `join adds a Windows Server 2019, 2022 or 2025 machine that no Cluster API
provider created to a kubeadm-based cluster (winkube's or any other), the path
sig-windows-tools' PrepareNode.ps1 and kubeadm join walk by hand. MACHINE is
its host name, which becomes the node's name.

First a preflight on the cluster: kube-public/cluster-info and kubeadm's
bootstrap bindings, the host name (15 characters at most, not a node yet), the
Windows release against the Kubernetes version, a CNI that serves Windows
(Calico with strictAffinity, or flannel VXLAN with VNI 4096 and port 4789) with
its Windows DaemonSet, and kube-proxy-windows at the cluster's version. Each
problem is printed with its fix, and nothing is created. With --apply-addons the
Windows add-ons the cluster lacks (kube-proxy-windows at the cluster's version,
the CNI's Windows DaemonSet at its Linux one's) are applied first, the objects
winkube's flavors deliver; without it nothing is applied.

Then it creates a bootstrap token as kubeadm token create does (24 hours by
default) and renders the PowerShell script that checks the machine (host name,
build, API server reachable, clock), installs the Containers feature, containerd
(the cluster's Windows nodes' version), kubelet and kubeadm (the cluster's
version, each verified by its published SHA-256), registers the kubelet service
after containerd, opens the kubelet's port, excludes the CNI from Defender, and
runs kubeadm join on containerd's pipe. With --ssh it runs the script on the
machine; otherwise (or with --print-script) it prints it.`,
		Example: `  winkube node join byo-win-1 --kubeconfig cluster.kubeconfig --windows-version 2022 --print-script > join.ps1
  winkube node join byo-win-1 --local winkube --ssh 127.0.0.50 -l Administrator -i ~/.ssh/id_ed25519`,
		Args: oneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.cluster.cmd, o.Join.Node = cmd, args[0]
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	o.cluster.clusterFlags(cmd, "to reach the workload cluster through its kubeconfig Secret", "join to")
	o.ssh.addFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.WindowsVersion, "windows-version", string(infrav1.WindowsServer2022), "the machine's Windows Server release: 2019, 2022 or 2025")
	f.StringVar(&o.Join.APIServer, "api-server", "", "HOST:PORT of the API server as the machine reaches it (default: the server kube-public/cluster-info publishes)")
	f.DurationVar(&o.Join.TokenTTL, "token-ttl", nodejoin.DefaultTokenTTL, "lifetime of the bootstrap token")
	f.StringVar(&o.Join.ContainerdVersion, "containerd-version", "", "containerd release to install (default: the one the cluster's Windows nodes of this release run, else "+nodejoin.DefaultContainerd+")")
	f.BoolVar(&o.Join.PrintScript, "print-script", false, "print the script (with a new token) instead of running it")
	f.BoolVar(&o.Join.ApplyAddons, "apply-addons", false, "apply the Windows add-ons the cluster lacks (kube-proxy-windows, the CNI's Windows DaemonSet) as winkube's flavors deliver them, server-side with field manager "+nodejoin.FieldManager+"; without it they are only reported")
	f.StringVar(&o.Join.FlannelWindowsImage, "flannel-windows-image", "", "with --apply-addons on a flannel cluster: the flannel HostProcess image you built (none is published)")
	f.StringVar(&o.Join.KubeProxyWindowsImage, "kube-proxy-windows-image", "", "with --apply-addons on a flannel cluster: the kube-proxy HostProcess image you built (none is published)")
	f.DurationVar(&o.Join.Wait, "wait", 10*time.Minute, "with --ssh: how long to wait for the node to be Ready with kube-proxy and the CNI running before diagnosing it (0: do not wait)")
	return cmd
}

func newNodeLeaveCommand() *cobra.Command {
	o := &nodeLeaveOptions{}
	cmd := &cobra.Command{
		Use:   "leave NODE",
		Short: "Drain a node that 'node join' added, reset its machine and remove it from the cluster",
		Long: `leave undoes 'winkube node join': it cordons the node, evicts its pods (not
the DaemonSets' or static pods, as kubectl drain --ignore-daemonsets), then with
--ssh runs kubeadm reset on the machine and removes the kubelet and containerd
services and their files, deletes the Node, and deletes the bootstrap tokens
'node join' made for it. Without --ssh the machine is left as it is.`,
		Example: `  winkube node leave byo-win-1 --local winkube --ssh 127.0.0.50 -l Administrator`,
		Args:    oneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.cluster.cmd, o.Node = cmd, args[0]
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.ErrOrStderr()) })
		},
	}
	o.cluster.clusterFlags(cmd, "to reach the workload cluster through its kubeconfig Secret", "remove from")
	o.ssh.addFlags(cmd)
	cmd.Flags().DurationVar(&o.DrainTimeout, "drain-timeout", 5*time.Minute, "how long to wait for the node's pods to be evicted")
	return cmd
}
