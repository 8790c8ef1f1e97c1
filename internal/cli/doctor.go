package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/scheme"
)

type doctorOptions struct {
	kubeconfig, context                          string
	mgmtKubeconfig, mgmtContext, namespace, name string
	local, stateDir                              string
	output                                       string
	certWarning                                  time.Duration
	azure                                        bool
	cmd                                          *cobra.Command // for bad input's pointer to --help
}

// doctorCommandOptions is `winkube doctor`'s input, split as generate
// cluster's is (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); internal/doctor runs
// the checks. doctorOptions alone is the way to a cluster that rehearse
// and plan share, so the methods are on this type, not promoted to theirs.
type doctorCommandOptions struct{ doctorOptions }

// Validate refuses, before any cluster is asked, a format doctor cannot
// write, a negative --cert-warning and two local worlds named at once
// (--state-dir would win silently over --local).
func (o *doctorCommandOptions) Validate() error {
	if err := checkOutput(nil, o.output, "text", "json"); err != nil {
		return err
	}
	if o.certWarning < 0 {
		return badInputf(nil, "--cert-warning %s: want how long before its expiry a certificate is reported, such as 720h (30 days, the default)", o.certWarning)
	}
	return o.oneWorld()
}

// oneWorld refuses --local with --state-dir: resolveLocal would take the
// directory and name the Cluster after --local, two worlds at once.
func (o *doctorOptions) oneWorld() error {
	if o.local != "" && o.stateDir != "" {
		return badInputf(nil, "--local %s and --state-dir %s both name a local world: give one", o.local, o.stateDir)
	}
	return nil
}

func newDoctorCommand() *cobra.Command {
	o := &doctorCommandOptions{}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Diagnose a mixed Linux/Windows cluster and say how to fix what is wrong",
		Long: `Check a workload cluster for what breaks mixed Linux/Windows clusters, and
print each finding with its fix: Windows nodes per build and pods whose images
do not match their node's OS, build or platform; workloads without an OS
selection that can land on Windows; DaemonSets that cannot run on Windows
nodes; Windows nodes without a ready kube-proxy or CNI; nodes no cloud
provider initialized; the CNI's VXLAN VNI, port and MTU; the HostProcess
feature gate (Kubernetes 1.22 to 1.25); dockershim on 1.24 or newer; version
skew between the control plane and kubelets; Services beyond the 64 backends
old Windows Server 2019 builds balance over; Secrets mounted into Windows
pods; Services that select no pod or target undeclared ports; certificates
close to expiry; and, with the management cluster, AzureMachines and
AzureMachinePools whose provisioning failed, with Azure's error.

Exit status: 0 when clean, 1 with warnings, 2 with errors.`,
		Example: `  winkube doctor --local winkube
  winkube doctor --kubeconfig workload.kubeconfig -o json
  winkube doctor --management-kubeconfig ~/.kube/config --cluster demo -n default`,
		Args: cobra.NoArgs,
		RunE: optionsRunE(&o.doctorOptions, o),
	}
	f := cmd.Flags()
	o.clusterFlags(cmd, "to check the cluster's AzureMachines and AzureMachinePools", "diagnose")
	outputFlag(cmd, &o.output, "text", "text", "json")
	f.DurationVar(&o.certWarning, "cert-warning", 30*24*time.Hour, "report certificates that expire within this time")
	f.BoolVar(&o.azure, "azure", true, "the cluster's network is Azure's (VNet MTU 1400, so the overlay MTU must be 1350 or less); the local world behaves as Azure")
	return cmd
}

// Run diagnoses the cluster and writes the report on out; warnings and
// errors come back as the ExitStatus doctor exits with.
func (o *doctorCommandOptions) Run(ctx context.Context, out io.Writer) error {
	if err := o.resolveLocal(); err != nil {
		return err
	}
	opts := doctor.Options{Namespace: o.namespace, ClusterName: o.name, CertWarning: o.certWarning, Azure: o.azure}
	c, err := o.connect(ctx)
	if err != nil {
		return err
	}
	opts.Management, opts.ClusterName, opts.Workload, opts.WorkloadConfig = c.management, c.cluster, c.workload, c.workloadConfig
	report, err := doctor.Run(ctx, opts)
	if err != nil {
		if o.stateDir != "" {
			return fmt.Errorf("%w (is the local world in %s running? start it with 'winkube up')", err, o.stateDir)
		}
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(struct {
			doctor.Report
			ExitCode int `json:"exitCode"`
		}{report, report.ExitCode()})
	} else {
		err = report.WriteText(out)
	}
	if err != nil {
		return err
	}
	if code := report.ExitCode(); code != 0 {
		return ExitStatus(code)
	}
	return nil
}

// clusterFlags are the ways to reach a workload cluster, shared by the
// commands that read one: what the management cluster is for, and the verb
// for a local world ("diagnose").
func (o *doctorOptions) clusterFlags(cmd *cobra.Command, management, verb string) {
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the workload cluster (default: the management cluster's <cluster>-kubeconfig Secret when a management cluster is given, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.context, "context", "", "context of the workload kubeconfig")
	f.StringVar(&o.mgmtKubeconfig, "management-kubeconfig", "", "kubeconfig of the management cluster, "+management)
	f.StringVar(&o.mgmtContext, "management-context", "", "context of the management kubeconfig")
	f.StringVarP(&o.namespace, "namespace", "n", "default", "namespace of the cluster's objects in the management cluster")
	f.StringVar(&o.name, "cluster", "", "the Cluster in the management cluster (default: the only one in the namespace)")
	f.StringVar(&o.local, "local", "", verb+" the local world NAME made by 'winkube up NAME' (its state in ~/.winkube/NAME)")
	f.StringVar(&o.stateDir, "state-dir", "", verb+" the local world whose state is in this directory (as --local)")
}

// connection is what connect reaches.
type connection struct {
	management     client.Client // nil without --management-kubeconfig
	cluster        string
	workload       client.Client
	workloadConfig *rest.Config
}

// connect reaches the management cluster when one is given (and names its
// Cluster), then the workload cluster: --kubeconfig, or the Cluster's
// kubeconfig Secret.
func (o *doctorOptions) connect(ctx context.Context) (connection, error) {
	c := connection{cluster: o.name}
	if o.mgmtKubeconfig != "" {
		cfg, err := loadConfig(o.mgmtKubeconfig, o.mgmtContext)
		if err != nil {
			return c, fmt.Errorf("management cluster: %w", err)
		}
		if c.management, err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
			return c, err
		}
		if c.cluster == "" {
			if c.cluster, err = onlyCluster(ctx, c.management, o.namespace); err != nil {
				return c, err
			}
		}
	}
	var err error
	switch {
	case o.kubeconfig != "" || c.management == nil:
		c.workloadConfig, err = loadConfig(o.kubeconfig, o.context)
	default:
		c.workloadConfig, err = workloadConfig(ctx, c.management, o.namespace, c.cluster)
	}
	if err != nil {
		return c, fmt.Errorf("workload cluster: %w", err)
	}
	c.workload, err = client.New(c.workloadConfig, client.Options{Scheme: scheme.New()})
	return c, err
}

// resolveLocal points a local world's name or state directory at its
// management kubeconfig, whose Cluster is named after the world.
func (o *doctorOptions) resolveLocal() error {
	dir, mgmt, err := localWorld(o.cmd, o.local, o.stateDir)
	if err != nil || dir == "" {
		return err
	}
	o.stateDir = dir
	if o.mgmtKubeconfig == "" {
		o.mgmtKubeconfig = mgmt
	}
	if o.name == "" {
		o.name = o.local
	}
	return nil
}

func loadConfig(path, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
}

// onlyCluster names the one Cluster of a namespace.
func onlyCluster(ctx context.Context, c client.Client, namespace string) (string, error) {
	list := &clusterv1.ClusterList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("listing the management cluster's Clusters: %w", err)
	}
	switch len(list.Items) {
	case 1:
		return list.Items[0].Name, nil
	case 0:
		return "", fmt.Errorf("no Cluster in namespace %s of the management cluster: pass -n or --kubeconfig for the workload cluster", namespace)
	}
	return "", fmt.Errorf("%d Clusters in namespace %s of the management cluster: pass --cluster NAME", len(list.Items), namespace)
}

// workloadConfig reads the admin kubeconfig Cluster API keeps for a cluster.
func workloadConfig(ctx context.Context, c client.Client, namespace, name string) (*rest.Config, error) {
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name + "-kubeconfig"}, s); err != nil {
		return nil, fmt.Errorf("reading %s/%s-kubeconfig from the management cluster (Cluster API writes it once the control plane is up): %w", namespace, name, err)
	}
	raw := s.Data["value"]
	if len(raw) == 0 {
		return nil, errors.New("the kubeconfig Secret has no 'value'")
	}
	return clientcmd.RESTConfigFromKubeConfig(raw)
}
