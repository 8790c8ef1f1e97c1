package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"golang.org/x/crypto/ssh"
	"golang.org/x/term"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
)

// upOptions is `winkube up`'s input, split as generate cluster's is
// (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); localworld.Run runs
// the world.
type upOptions struct {
	// Name is the NAME argument: the world, and its cluster.
	Name string

	flavor, version, windowsVersion, stateDir, bin string
	controlPlane, linux, windows                   int32
	metricsServer, azureDiskCSI                    bool
	timeout                                        time.Duration
	// images are loaded into the world's registry once it runs.
	images []string
	// bootstrapTimeout: see the flag.
	bootstrapTimeout time.Duration
}

func (o *upOptions) defaultStateDir(name string) error {
	if o.stateDir != "" {
		return nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("no --state-dir and no home directory: %w", err)
	}
	o.stateDir = filepath.Join(home, ".winkube", name)
	return nil
}

// checkFlags refuses flag values no world can be made of.
func (o *upOptions) checkFlags() error {
	if err := localworld.CheckKubernetesVersion(o.version); err != nil {
		return err
	}
	switch infrav1.WindowsServerVersion(o.windowsVersion) {
	case infrav1.WindowsServer2019, infrav1.WindowsServer2022, infrav1.WindowsServer2025:
	default:
		return fmt.Errorf("--windows-version %q: want 2019, 2022 or 2025", o.windowsVersion)
	}
	if o.controlPlane < 1 || o.controlPlane%2 == 0 {
		return fmt.Errorf("--control-plane-nodes %d: want an odd number (1, 3, 5), so that etcd keeps a quorum", o.controlPlane)
	}
	if o.linux < 0 {
		return fmt.Errorf("--linux-nodes %d: a node count cannot be negative", o.linux)
	}
	if o.windows < 0 {
		return fmt.Errorf("--windows-nodes %d: a node count cannot be negative", o.windows)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration such as 15m", o.timeout)
	}
	return nil
}

// check refuses, before anything starts, what the world's cluster would be
// refused for: the flags, then the flavor's objects through the webhooks'
// defaulting and validation (the one validation path generate uses too).
func (o *upOptions) check(name string) error {
	if err := o.checkFlags(); err != nil {
		return badInput(nil, err)
	}
	// The world's own key is made when it first starts; any valid key gets
	// the same verdict from the checks.
	key, err := throwawaySSHKey()
	if err != nil {
		return err
	}
	wo := localworld.Options{Name: name, Flavor: o.flavor, KubernetesVersion: o.version, ControlPlaneNodes: o.controlPlane,
		LinuxNodes: o.linux, WindowsNodes: o.windows, WindowsVersion: infrav1.WindowsServerVersion(o.windowsVersion), MetricsServer: o.metricsServer,
		AzureDiskCSI: o.azureDiskCSI}
	_, err = admitFlavor(context.Background(), o.flavor, wo.ClusterOptions(key))
	return err
}

// Validate refuses, before anything starts, what no world can be made of:
// the flags and the flavor's objects (check), a --bootstrap-timeout no
// machine could meet, an --image that is not there, and a --bin without
// the binaries the world runs, naming the flag.
func (o *upOptions) Validate() error {
	if err := o.check(o.Name); err != nil {
		return err
	}
	if o.bootstrapTimeout <= 0 {
		return badInputf(nil, "--bootstrap-timeout %s: want a positive duration such as %s", o.bootstrapTimeout, localworld.DefaultLocalBootstrapTimeout)
	}
	for _, p := range o.images {
		if _, err := os.Stat(p); err != nil {
			return badInputf(nil, "--image %s: %v", p, err)
		}
	}
	return o.checkBin()
}

// checkBin refuses a --bin that lacks the world's binaries, or
// metrics-server for --metrics-server, as bad input; binaries missing
// where winkube looks by default are the machine's to change, not a flag's.
func (o *upOptions) checkBin() error {
	bin, err := findBin(o.bin)
	if err != nil {
		if o.bin != "" {
			return badInputf(nil, "--bin %s: %w", o.bin, err)
		}
		return err
	}
	// The add-on's pod runs the real metrics-server, from bin/ as well.
	if _, err := os.Stat(filepath.Join(bin, "metrics-server")); o.metricsServer && err != nil {
		return badInputf(nil, "--metrics-server runs the metrics-server that hack/tools builds, and %s has none: build it with `make tools` (or leave out --metrics-server)", bin)
	}
	return nil
}

// Run starts the world and keeps it running until ctx ends or an
// interrupt comes, showing progress and, once it is ready, how to use it
// on out.
func (o *upOptions) Run(ctx context.Context, out io.Writer) error {
	wo, err := o.world(o.Name, progressPrinter(out))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return localworld.Run(ctx, wo, localworld.RunOptions{ReadyTimeout: o.timeout, Images: o.images, Ready: func(mgmt, workload string) {
		fmt.Fprintf(out, "\nCluster %s is ready.\n\n  kubectl --kubeconfig %s get nodes -o wide\n  kubectl --kubeconfig %s apply -f examples/iis.yaml\n  kubectl --kubeconfig %s get clusters,machines   # the management cluster\n  winkube ssh --state-dir %s NODE               # log in to a node (rdp, logs likewise)\n\nwinkube keeps running the cluster; Ctrl-C stops it, 'winkube down %s' deletes it.\n",
			wo.Name, workload, workload, mgmt, wo.StateDir, wo.Name)
	}})
}

func throwawaySSHKey() (string, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))), nil
}

func (o *upOptions) world(name string, progress func(string)) (localworld.Options, error) {
	if err := o.defaultStateDir(name); err != nil {
		return localworld.Options{}, err
	}
	bin, err := findBin(o.bin)
	if err != nil {
		return localworld.Options{}, err
	}
	if err := o.checkFlags(); err != nil {
		return localworld.Options{}, err
	}
	wv := infrav1.WindowsServerVersion(o.windowsVersion)
	// Before the log is opened in it: a directory that is not a world's
	// gets nothing written into it.
	if err := localworld.ClaimStateDir(o.stateDir, name); err != nil {
		return localworld.Options{}, err
	}
	logf, err := os.OpenFile(filepath.Join(o.stateDir, "winkube.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return localworld.Options{}, err
	}
	// Controller logs go to the state directory; the terminal shows
	// progress. So does what client-go's own code says through klog (a
	// simulated kubelet's watch ended by its node's deletion, a response
	// cut short under load): a component's log line, not winkube's output.
	// Milliseconds: the local world's steps are a few hundred apart.
	logger := zap.New(zap.WriteTo(logf), func(o *zap.Options) { o.TimeEncoder = zapcore.ISO8601TimeEncoder })
	ctrllog.SetLogger(logger)
	klog.SetLogger(logger)
	return localworld.Options{
		Log:  ctrllog.Log,
		Name: name, Flavor: o.flavor, KubernetesVersion: o.version, ControlPlaneNodes: o.controlPlane, LinuxNodes: o.linux, WindowsNodes: o.windows,
		WindowsVersion: wv, StateDir: o.stateDir, Bin: bin, Progress: progress, BootstrapTimeout: o.bootstrapTimeout, MetricsServer: o.metricsServer,
		AzureDiskCSI: o.azureDiskCSI,
	}, nil
}

// findBin locates the binaries hack/tools builds: --bin, $WINKUBE_BIN, or
// bin/ beside winkube's executable or in the working directory.
func findBin(flag string) (string, error) {
	var candidates []string
	if flag != "" {
		candidates = []string{flag}
	} else {
		if env := os.Getenv("WINKUBE_BIN"); env != "" {
			candidates = append(candidates, env)
		}
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Dir(exe), filepath.Join(filepath.Dir(exe), "..", "bin"))
		}
		candidates = append(candidates, "bin")
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, "kube-apiserver")); err == nil {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("kube-apiserver, etcd and kubeadm were not found in %s: build them with `make tools` (or pass --bin)", strings.Join(candidates, ", "))
}

// progressPrinter writes plain timestamped lines; on a terminal it keeps
// the latest status on one line that it rewrites.
func progressPrinter(w io.Writer) func(string) {
	start := time.Now()
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	status := false
	return func(s string) {
		line := fmt.Sprintf("[%5.1fs] %s", time.Since(start).Seconds(), s)
		if !tty {
			fmt.Fprintln(w, line)
			return
		}
		isStatus := strings.HasPrefix(s, "nodes Ready") || strings.HasPrefix(s, "deleting:")
		if status {
			fmt.Fprint(w, "\r\033[K")
		}
		if isStatus {
			fmt.Fprint(w, line)
		} else {
			fmt.Fprintln(w, line)
		}
		status = isStatus
	}
}

func addWorldFlags(cmd *cobra.Command, o *upOptions) {
	cmd.Flags().StringVar(&o.stateDir, "state-dir", "", "where the management plane, machine disks, kubeconfigs and SSH key live (default ~/.winkube/NAME)")
	cmd.Flags().StringVar(&o.bin, "bin", "", "directory of kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kubeadm (default: bin/ beside winkube, or $WINKUBE_BIN)")
}

func newUpCommand() *cobra.Command {
	o := &upOptions{}
	cmd := &cobra.Command{
		Use:   "up [NAME]",
		Short: "Create a mixed Linux/Windows cluster on this machine and run it",
		Long: `Create a Kubernetes cluster with a Linux control plane and Linux and Windows
workers on this machine, with no cloud: winkube runs a management cluster
(etcd and kube-apiserver), Cluster API's controllers and its own, an Azure
emulator and a machine runtime in this process. Control-plane machines run a
real etcd, kube-apiserver, controller-manager and scheduler; workers join
with kubeadm's TLS bootstrap and run simulated kubelets that follow the
rules of their OS (Windows builds, HostProcess, image platforms).

up shows progress until every node is Ready and the add-ons run, writes the
kubeconfigs into the state directory and keeps running: the cluster lives as
long as this process. Interrupt it (Ctrl-C) to stop it: the state stays, and
'winkube up' with the same name (or --state-dir) resumes the same cluster.
'winkube down' deletes the cluster through Cluster API and stops everything.`,
		Example: `  winkube up
  winkube up demo --windows-nodes 3 --windows-version 2025
  KUBECONFIG=~/.winkube/winkube/winkube.kubeconfig kubectl get nodes -o wide`,
		Args:              atMostOneName,
		ValidArgsFunction: completeLocalWorlds,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = worldName(args)
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout()) })
		},
	}
	cmd.Flags().StringVar(&o.flavor, "flavor", flavors.Windows, "cluster flavor: "+strings.Join(flavors.Names(), ", "))
	cmd.Flags().StringVar(&o.version, "kubernetes-version", localworld.KubernetesVersion,
		"Kubernetes version of the cluster: "+strings.Join(localworld.KubernetesVersions(), " or ")+" (the previous minor, to rehearse an upgrade)")
	cmd.Flags().Int32Var(&o.controlPlane, "control-plane-nodes", 1, "control-plane machines (odd: 1, 3 or 5); each runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler")
	cmd.Flags().Int32Var(&o.linux, "linux-nodes", 1, "Linux worker machines")
	cmd.Flags().Int32Var(&o.windows, "windows-nodes", 2, "Windows worker machines")
	cmd.Flags().StringVar(&o.windowsVersion, "windows-version", "2022", "Windows Server release of the Windows workers: 2019, 2022 or 2025")
	cmd.Flags().BoolVar(&o.metricsServer, "metrics-server", false, "install metrics-server (kubectl top, HorizontalPodAutoscaler) with the flavors' add-on: the Cluster label metrics-server=enabled selects its ClusterResourceSet")
	cmd.Flags().BoolVar(&o.azureDiskCSI, "azuredisk-csi", false, "install the Azure Disk CSI driver (PersistentVolumes on Azure managed disks, StorageClass managed-csi) with the flavors' add-on: the Cluster label azuredisk-csi=true selects its ClusterResourceSet")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 15*time.Minute, "how long to wait for every node to be Ready")
	cmd.Flags().StringArrayVar(&o.images, "image", nil, "load the images of this docker save tarball, OCI archive or OCI layout directory into the world's registry before the cluster is made (repeatable; see 'winkube image load --help')")
	cmd.Flags().DurationVar(&o.bootstrapTimeout, "bootstrap-timeout", localworld.DefaultLocalBootstrapTimeout, "how long a provisioned machine may take to become a node before the provider reports its bootstrap failed, with its log read through Run Command (see 'winkube rehearse bootstrap-failure')")
	addWorldFlags(cmd, o)
	return cmd
}

// worldName is the local world that up's and down's optional NAME names:
// winkube when it is left out.
func worldName(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	return "winkube"
}

// downOptions is `winkube down`'s input: the world's name, --state-dir
// and --bin (up's fields, for the world it may start to delete from);
// localworld.Down deletes.
type downOptions struct {
	upOptions
}

// Validate is the guard of the user's directories: a --state-dir (or
// ~/.winkube/NAME) that is not a world 'winkube up' made is refused before
// anything in it is read further, let alone removed; so is a --bin without
// the binaries a world runs.
func (o *downOptions) Validate() error {
	if err := o.defaultStateDir(o.Name); err != nil {
		return err
	}
	switch err := localworld.CheckWorld(o.stateDir); {
	case errors.Is(err, os.ErrNotExist):
		return badInputf(nil, "no cluster state in %s: nothing to delete (name the world, or its --state-dir)", o.stateDir)
	case errors.Is(err, localworld.ErrNotWorld):
		return badInputf(nil, "--state-dir %s: %v; down deletes only a directory 'winkube up' made: name the world, or its --state-dir", o.stateDir, err)
	case err != nil:
		return err
	}
	return o.checkBin()
}

// Run deletes the world's cluster and removes its files, showing progress
// on out.
func (o *downOptions) Run(ctx context.Context, out io.Writer) error {
	// down makes no cluster: these only pass up's flag checks.
	o.controlPlane, o.windowsVersion, o.version, o.flavor, o.timeout = 1, "2022", "v1.36.3", flavors.Windows, 15*time.Minute
	wo, err := o.world(o.Name, progressPrinter(out))
	if err != nil {
		return err
	}
	return localworld.Down(ctx, wo)
}

func newDownCommand() *cobra.Command {
	o := &downOptions{}
	cmd := &cobra.Command{
		Use:   "down [NAME]",
		Short: "Delete a cluster made by 'winkube up' and stop it",
		Long: `Delete the cluster through Cluster API, so its machines and every Azure
resource in the emulator go, then stop the 'winkube up' process that runs it
(the one holding the state directory's lock) and remove the world's files
from the state directory: only what a world makes there, and the directory
once nothing else is left in it. A directory that is not a world's is
refused. Without a running 'winkube up', down starts the management plane
from the state directory to delete what it holds.`,
		Args:              atMostOneName,
		ValidArgsFunction: completeLocalWorlds,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = worldName(args)
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout()) })
		},
	}
	addWorldFlags(cmd, &o.upOptions)
	return cmd
}
