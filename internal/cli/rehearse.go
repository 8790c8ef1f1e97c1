package cli

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/rehearsal"
)

// RehearsalLabel marks what a rehearsal made, with its class, so that
// --delete finds it.
const RehearsalLabel = "winkube.dev/rehearsal"

func newRehearseCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rehearse",
		Short: "Practise diagnosing failures on a cluster, by breaking a new machine on purpose",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return badInputf(cmd, "name what to rehearse: winkube rehearse bootstrap-failure CLASS")
		},
	}
	cmd.AddCommand(newRehearseBootstrapCommand())
	return cmd
}

// rehearseOptions is `winkube rehearse bootstrap-failure`'s input, split as
// generate cluster's is (clusterctl's cmd/ and client/,
// kubernetes-sigs/cluster-api cmd/clusterctl/cmd/generate_cluster.go
// @8961830d); internal/rehearsal breaks the bootstrap.
type rehearseOptions struct {
	doctorOptions
	from    string
	timeout time.Duration
	delete  bool
	// Args are the CLASS arguments; Validate turns them into classes.
	Args    []string
	classes []rehearsal.Class
}

// Validate refuses classes that do not exist and flags that would be
// ignored, naming them, before the management cluster is asked.
func (o *rehearseOptions) Validate() error {
	if o.delete && o.from != "" {
		return badInputf(nil, "--delete removes every rehearsal of the cluster: --machine-deployment %s chooses what a new one copies; drop one of them", o.from)
	}
	if o.delete && o.timeout != 0 {
		return badInputf(nil, "--delete removes every rehearsal of the cluster: --kubeadm-timeout %s applies to a new one; drop one of them", o.timeout)
	}
	classes, err := o.parseClasses(o.Args)
	if err != nil {
		return err
	}
	o.classes = classes
	return nil
}

// Run adds the rehearsals' MachineDeployments, or removes them with
// --delete, saying what it did on out.
func (o *rehearseOptions) Run(ctx context.Context, out io.Writer) error {
	if err := o.resolveLocal(); err != nil {
		return err
	}
	if o.mgmtKubeconfig == "" {
		return badInputf(nil, "a rehearsal adds MachineDeployments: give the management cluster (--management-kubeconfig, --local or --state-dir)")
	}
	c, err := o.connect(ctx)
	if err != nil {
		return err
	}
	if o.delete {
		return o.remove(ctx, c, out)
	}
	return o.rehearse(ctx, c, o.classes, out)
}

func classNames() []string {
	out := make([]string, 0, len(rehearsal.Classes))
	for _, c := range rehearsal.Classes {
		out = append(out, string(c))
	}
	return out
}

func newRehearseBootstrapCommand() *cobra.Command {
	o := &rehearseOptions{}
	cmd := &cobra.Command{
		Use:   "bootstrap-failure CLASS...|all",
		Short: "Add a machine whose bootstrap fails in a known way, to practise the diagnosis",
		Long: `A Windows machine that never becomes a node is the most common failure of a
mixed cluster, and the one with least to go on. This command adds, for each
CLASS, a MachineDeployment of one machine beside an existing one
(--machine-deployment, by default the cluster's Windows one), with a copy of
its bootstrap template broken in that way. Only the bootstrap input changes:
what follows is what cloud-init or cloudbase-init and kubeadm do with it, on
Azure as in the local world.

Classes:
  prekubeadm-command    a preKubeadmCommands line runs a script that is not there and exits
  malformed-file        a file whose base64 content does not decode (cloud-init stops at
                        it; cloudbase-init writes it raw and a Windows node still joins)
  missing-azure-json    the cloud provider's azure.json is not written (nothing reads it
                        while a worker joins: the node joins, as on Azure)
  expired-token         discovery uses a bootstrap token that expired before the boot
  wrong-ca-hash         discovery pins a CA key the cluster does not have
  unreachable-endpoint  discovery targets 192.0.2.10:6443, which nothing answers
  unknown-kubelet-flag  the kubelet gets a flag its version removed
  wrong-cri-socket      the kubelet is pointed at a container runtime the image lacks

Then watch the machine fail and find out why, as on a real cluster: the
provider reads the bootstrap log through Azure's Run Command once the
bootstrap deadline passes ('winkube manager --bootstrap-timeout'; 2 minutes
in the local world) and reports it in the AzureMachine's BootstrapSucceeded
condition; 'winkube doctor' explains it; 'winkube logs MACHINE' collects the
node's logs through Run Command when SSH cannot reach it.

--kubeadm-timeout shortens kubeadm's discovery and kubelet-check waits (5m
and 4m by default), so that the classes that wait fail sooner. --delete
removes every rehearsal of the cluster (CLASS not needed).`,
		Example: `  winkube rehearse bootstrap-failure unreachable-endpoint --local winkube
  winkube rehearse bootstrap-failure all --local winkube --kubeadm-timeout 1m
  winkube rehearse bootstrap-failure --delete --local winkube`,
		ValidArgs: append(classNames(), "all"),
		Args:      cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.cmd, o.Args = cmd, args
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout()) })
		},
	}
	o.clusterFlags(cmd, "where the rehearsal's MachineDeployments are added (required)", "rehearse on")
	f := cmd.Flags()
	f.StringVar(&o.from, "machine-deployment", "", "the MachineDeployment whose machines the rehearsal's are copies of (default: the cluster's Windows one)")
	f.DurationVar(&o.timeout, "kubeadm-timeout", 0, "kubeadm's discovery and kubelet-check timeouts in the broken bootstrap (default: kubeadm's, 5m and 4m)")
	f.BoolVar(&o.delete, "delete", false, "remove the cluster's rehearsals")
	return cmd
}

func (o *rehearseOptions) parseClasses(args []string) ([]rehearsal.Class, error) {
	if o.delete {
		if len(args) > 0 {
			return nil, badInputf(o.cmd, "--delete removes every rehearsal: name no class")
		}
		return nil, nil
	}
	if len(args) == 0 {
		return nil, badInputf(o.cmd, "name a class (%s) or all", strings.Join(classNames(), ", "))
	}
	if o.timeout < 0 {
		return nil, badInputf(o.cmd, "--kubeadm-timeout %s: want a positive duration such as 1m", o.timeout)
	}
	if slices.Contains(args, "all") {
		return rehearsal.Classes, nil
	}
	var out []rehearsal.Class
	for _, a := range args {
		if !slices.Contains(rehearsal.Classes, rehearsal.Class(a)) {
			return nil, badInputf(o.cmd, "%q is not a class: use one of %s, or all", a, strings.Join(classNames(), ", "))
		}
		out = append(out, rehearsal.Class(a))
	}
	return out, nil
}

// source is the MachineDeployment the rehearsal copies, and whether its
// machines run Windows.
func (o *rehearseOptions) source(ctx context.Context, c connection) (*clusterv1.MachineDeployment, bool, error) {
	mds := &clusterv1.MachineDeploymentList{}
	if err := c.management.List(ctx, mds, client.InNamespace(o.namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: c.cluster}); err != nil {
		return nil, false, fmt.Errorf("listing the cluster's MachineDeployments: %w", err)
	}
	var windows []string
	for i := range mds.Items {
		md := &mds.Items[i]
		if md.Labels[RehearsalLabel] != "" {
			continue
		}
		win, err := o.windows(ctx, c, md)
		if err != nil {
			return nil, false, err
		}
		if o.from == md.Name {
			return md, win, nil
		}
		if win {
			windows = append(windows, md.Name)
		}
	}
	if o.from != "" {
		return nil, false, badInputf(o.cmd, "--machine-deployment %s: no MachineDeployment of cluster %s in namespace %s has that name", o.from, c.cluster, o.namespace)
	}
	if len(windows) != 1 {
		return nil, false, badInputf(o.cmd, "cluster %s has %d Windows MachineDeployments (%s): choose one with --machine-deployment", c.cluster, len(windows), strings.Join(windows, ", "))
	}
	for i := range mds.Items {
		if mds.Items[i].Name == windows[0] {
			return &mds.Items[i], true, nil
		}
	}
	return nil, false, nil
}

func (o *rehearseOptions) windows(ctx context.Context, c connection, md *clusterv1.MachineDeployment) (bool, error) {
	ref := md.Spec.Template.Spec.InfrastructureRef
	if ref.Kind != "AzureMachineTemplate" {
		return false, nil
	}
	t := &infrav1.AzureMachineTemplate{}
	if err := c.management.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: ref.Name}, t); err != nil {
		return false, fmt.Errorf("reading the AzureMachineTemplate of MachineDeployment %s: %w", md.Name, err)
	}
	return t.Spec.Template.Spec.OS() == infrav1.Windows, nil
}

func (o *rehearseOptions) rehearse(ctx context.Context, c connection, classes []rehearsal.Class, out io.Writer) error {
	src, windows, err := o.source(ctx, c)
	if err != nil {
		return err
	}
	ref := src.Spec.Template.Spec.Bootstrap.ConfigRef
	if ref.Kind != "KubeadmConfigTemplate" {
		return fmt.Errorf("MachineDeployment %s is bootstrapped by a %s: rehearsals break kubeadm's bootstrap only", src.Name, ref.Kind)
	}
	kct := &bootstrapv1.KubeadmConfigTemplate{}
	if err := c.management.Get(ctx, client.ObjectKey{Namespace: src.Namespace, Name: ref.Name}, kct); err != nil {
		return fmt.Errorf("reading KubeadmConfigTemplate %s: %w", ref.Name, err)
	}
	for _, class := range classes {
		name := src.Name + "-rh-" + string(class)
		ro := rehearsal.Options{Windows: windows, Discovery: o.timeout, KubeletHealthCheck: o.timeout}
		if class == rehearsal.ExpiredToken {
			if ro.Token, err = expiredToken(ctx, c); err != nil {
				return err
			}
		}
		spec := kct.Spec.Template.Spec.DeepCopy()
		if err := rehearsal.Break(spec, class, ro); err != nil {
			return fmt.Errorf("%s: %w", class, err)
		}
		labels := map[string]string{clusterv1.ClusterNameLabel: c.cluster, RehearsalLabel: string(class)}
		broken := &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: name, Labels: labels},
			Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{Spec: *spec}}}
		md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: name, Labels: labels}, Spec: *src.Spec.DeepCopy()}
		md.Spec.Replicas = ptr.To[int32](1)
		md.Spec.Selector = metav1.LabelSelector{MatchLabels: labels}
		md.Spec.Template.ObjectMeta = clusterv1.ObjectMeta{Labels: labels}
		md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = name
		for _, obj := range []client.Object{broken, md} {
			if err := c.management.Create(ctx, obj); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return badInputf(o.cmd, "%s is already rehearsed (MachineDeployment %s): remove it first with --delete", class, name)
				}
				return fmt.Errorf("creating %s: %w", name, err)
			}
		}
		fmt.Fprintf(out, "%-21s MachineDeployment %s/%s: 1 machine like %s's, its bootstrap broken\n", class, src.Namespace, name, src.Name)
	}
	fmt.Fprintf(out, "\nWatch:   kubectl get azuremachines -n %s -l %s -o custom-columns=NAME:.metadata.name,BOOTSTRAP:'.status.conditions[?(@.type==\"BootstrapSucceeded\")].reason'\n", o.namespace, RehearsalLabel)
	fmt.Fprintf(out, "Explain: winkube doctor (with the management cluster); winkube logs MACHINE (Run Command when SSH cannot reach it)\n")
	fmt.Fprintf(out, "Remove:  winkube rehearse bootstrap-failure --delete\n")
	return nil
}

// expiredToken makes a bootstrap token in the workload cluster that
// expired a minute ago, and returns it ("id.secret").
func expiredToken(ctx context.Context, c connection) (string, error) {
	id, secret := randomToken(6), randomToken(16)
	s := rehearsal.TokenSecret(id, secret, time.Now().Add(-time.Minute))
	if err := c.workload.Create(ctx, s); err != nil {
		return "", fmt.Errorf("creating the expired bootstrap token in the workload cluster: %w", err)
	}
	return id + "." + secret, nil
}

// randomToken is n characters of a bootstrap token's alphabet, [a-z0-9]
// (kubernetes cluster-bootstrap token/api BootstrapTokenPattern).
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
		b[i] = alphabet[k.Int64()]
	}
	return string(b)
}

func (o *rehearseOptions) remove(ctx context.Context, c connection, out io.Writer) error {
	sel := client.MatchingLabels{clusterv1.ClusterNameLabel: c.cluster}
	mds := &clusterv1.MachineDeploymentList{}
	if err := c.management.List(ctx, mds, client.InNamespace(o.namespace), sel, client.HasLabels{RehearsalLabel}); err != nil {
		return err
	}
	kcts := &bootstrapv1.KubeadmConfigTemplateList{}
	if err := c.management.List(ctx, kcts, client.InNamespace(o.namespace), sel, client.HasLabels{RehearsalLabel}); err != nil {
		return err
	}
	for i := range mds.Items {
		if err := client.IgnoreNotFound(c.management.Delete(ctx, &mds.Items[i])); err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted MachineDeployment %s/%s\n", o.namespace, mds.Items[i].Name)
	}
	for i := range kcts.Items {
		if err := client.IgnoreNotFound(c.management.Delete(ctx, &kcts.Items[i])); err != nil {
			return err
		}
	}
	if len(mds.Items) == 0 {
		fmt.Fprintf(out, "cluster %s has no rehearsal\n", c.cluster)
	}
	return nil
}
