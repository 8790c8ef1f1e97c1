package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/internal/doctor"
)

// Apply upgrades the cluster named key in the management cluster c to
// target, the control plane first, then the Linux pools, then the Windows
// pools, each once the one before has rolled out, writing progress lines
// to progress. It refuses when the plan finds errors. Run it again after an
// interruption or a failure: a step already made is not made again, only
// waited for.
func Apply(ctx context.Context, c client.Client, key client.ObjectKey, target string, progress io.Writer) error {
	_, err := Run(ctx, Options{Management: c, Namespace: key.Namespace, ClusterName: key.Name, Target: target, Progress: progress})
	return err
}

// StepError is a step that failed or did not finish in time.
type StepError struct {
	Step   Step
	Number int
	Of     int
	Target string
	// Waiting is what the step still waited for.
	Waiting string
	Err     error
}

func (e *StepError) Error() string {
	what := e.Waiting
	if e.Err != nil {
		what = e.Err.Error()
	}
	return fmt.Sprintf("step %d/%d, %s %s to %s: %s; once that is fixed, run the upgrade to %s again: it continues from this step",
		e.Number, e.Of, e.Step.Kind, e.Step.Name, e.Target, what, e.Target)
}

func (e *StepError) Unwrap() error { return e.Err }

// ErrPlanHasErrors is returned by Run when the plan found errors.
var ErrPlanHasErrors = errors.New("the upgrade plan has errors")

// Run plans the upgrade and, when the plan has no errors, applies it step
// by step, waiting for each to roll out.
func Run(ctx context.Context, o Options) (*Plan, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	p, err := build(ctx, &o)
	if err != nil {
		return nil, err
	}
	var msgs []string
	for _, f := range p.Findings {
		// An error the plan's own steps fix does not stop them.
		if f.Severity == doctor.Error && !p.fixed[f.Check+"/"+f.Object] {
			msgs = append(msgs, f.Message+" (fix: "+f.Fix+")")
		}
	}
	if len(msgs) > 0 {
		return p, fmt.Errorf("%w, nothing was changed: %s", ErrPlanHasErrors, strings.Join(msgs, "; "))
	}
	for i, st := range p.Steps {
		fmt.Fprintf(o.Progress, "[%d/%d] %s %s (%s): %s -> %s\n", i+1, len(p.Steps), st.Kind, st.Name, st.OS, st.From, o.Target)
		if err := apply(ctx, &o, st); err != nil {
			return p, &StepError{Step: st, Number: i + 1, Of: len(p.Steps), Target: o.Target, Err: err}
		}
		if waiting, err := wait4(ctx, &o, st); err != nil {
			return p, &StepError{Step: st, Number: i + 1, Of: len(p.Steps), Target: o.Target, Waiting: waiting, Err: err}
		}
		fmt.Fprintf(o.Progress, "[%d/%d] %s %s: every machine runs %s and is Ready\n", i+1, len(p.Steps), st.Kind, st.Name, o.Target)
	}
	fmt.Fprintf(o.Progress, "cluster %s runs %s\n", p.Cluster, o.Target)
	return p, nil
}

// apply makes a step's change unless it is made: new templates first
// (created once), then the version (and template) of its object.
func apply(ctx context.Context, o *Options, st Step) error {
	c := o.Management
	for _, t := range st.templates {
		t = t.DeepCopyObject().(client.Object)
		if t.GetResourceVersion() != "" {
			// The pool's own AzureMachinePool: changed in place.
			if err := c.Update(ctx, t); err != nil {
				return fmt.Errorf("updating %s %s: %w", t.GetObjectKind().GroupVersionKind().Kind, t.GetName(), err)
			}
			continue
		}
		if err := ignoreExists(c.Create(ctx, t)); err != nil {
			return fmt.Errorf("creating %s %s: %w", t.GetObjectKind().GroupVersionKind().Kind, t.GetName(), err)
		}
	}
	switch obj := st.obj.(type) {
	case *controlplanev1.KubeadmControlPlane:
		cur := &controlplanev1.KubeadmControlPlane{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		fs := removedKubeletArgs(&cur.Spec.KubeadmConfigSpec, o.Target)
		if cur.Spec.Version == o.Target && len(fs) == 0 {
			fmt.Fprintf(o.Progress, "      spec.version is %s already: waiting for the rollout\n", o.Target)
			return nil
		}
		before := cur.DeepCopy()
		cur.Spec.Version = o.Target
		dropKubeletArgs(&cur.Spec.KubeadmConfigSpec, fs)
		return c.Patch(ctx, cur, client.MergeFrom(before))
	case *clusterv1.MachineDeployment:
		cur := &clusterv1.MachineDeployment{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		if cur.Spec.Template.Spec.Version == o.Target && (st.NewTemplate == "" || cur.Spec.Template.Spec.InfrastructureRef.Name == st.NewTemplate) &&
			(st.NewBootstrapTemplate == "" || cur.Spec.Template.Spec.Bootstrap.ConfigRef.Name == st.NewBootstrapTemplate) {
			fmt.Fprintf(o.Progress, "      version is %s already: waiting for the rollout\n", o.Target)
			return nil
		}
		before := cur.DeepCopy()
		cur.Spec.Template.Spec.Version = o.Target
		if st.NewTemplate != "" {
			cur.Spec.Template.Spec.InfrastructureRef.Name = st.NewTemplate
		}
		if st.NewBootstrapTemplate != "" {
			cur.Spec.Template.Spec.Bootstrap.ConfigRef.Name = st.NewBootstrapTemplate
		}
		return c.Patch(ctx, cur, client.MergeFrom(before))
	case *clusterv1.MachinePool:
		cur := &clusterv1.MachinePool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		if cur.Spec.Template.Spec.Version == o.Target && (st.NewBootstrapTemplate == "" || cur.Spec.Template.Spec.Bootstrap.ConfigRef.Name == st.NewBootstrapTemplate) {
			fmt.Fprintf(o.Progress, "      version is %s already: waiting for the rollout\n", o.Target)
			return nil
		}
		before := cur.DeepCopy()
		cur.Spec.Template.Spec.Version = o.Target
		if st.NewBootstrapTemplate != "" {
			cur.Spec.Template.Spec.Bootstrap.ConfigRef.Name = st.NewBootstrapTemplate
		}
		return c.Patch(ctx, cur, client.MergeFrom(before))
	}
	return fmt.Errorf("unknown step kind %s", st.Kind)
}

// wait4 waits until every machine of the step's object runs the target and
// is Ready, printing what it waits for when that changes.
func wait4(ctx context.Context, o *Options, st Step) (string, error) {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, o.PollInterval, o.StepTimeout, true, func(ctx context.Context) (bool, error) {
		waiting, err := pending(ctx, o, st)
		if err != nil {
			return false, err
		}
		if waiting != "" && waiting != last {
			fmt.Fprintf(o.Progress, "      waiting: %s\n", waiting)
		}
		last = waiting
		return waiting == "", nil
	})
	if err != nil && last != "" {
		return last, fmt.Errorf("not rolled out after %s (%w): %s", o.StepTimeout, err, last)
	}
	return last, err
}

// pending says what a step still waits for ("" once done): its controller
// has seen the change, every replica is up to date and Ready, and every
// machine's version is the target.
func pending(ctx context.Context, o *Options, st Step) (string, error) {
	c := o.Management
	var gen, observed int64
	var replicas, ready, upToDate *int32
	var vs []clusterv1.StatusVersion
	var owner client.MatchingLabels
	switch obj := st.obj.(type) {
	case *controlplanev1.KubeadmControlPlane:
		owner = client.MatchingLabels{clusterv1.MachineControlPlaneNameLabel: obj.Name}
		cur := &controlplanev1.KubeadmControlPlane{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return "", err
		}
		gen, observed, replicas, ready, upToDate, vs = cur.Generation, cur.Status.ObservedGeneration, cur.Spec.Replicas, cur.Status.ReadyReplicas, cur.Status.UpToDateReplicas, cur.Status.Versions
	case *clusterv1.MachineDeployment:
		owner = client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: obj.Name}
		cur := &clusterv1.MachineDeployment{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return "", err
		}
		gen, observed, replicas, ready, upToDate, vs = cur.Generation, cur.Status.ObservedGeneration, cur.Spec.Replicas, cur.Status.ReadyReplicas, cur.Status.UpToDateReplicas, cur.Status.Versions
	case *clusterv1.MachinePool:
		owner = client.MatchingLabels{clusterv1.MachinePoolNameLabel: format.MustFormatValue(obj.Name)}
		cur := &clusterv1.MachinePool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return "", err
		}
		gen, observed, replicas, ready, upToDate, vs = cur.Generation, cur.Status.ObservedGeneration, cur.Spec.Replicas, cur.Status.ReadyReplicas, cur.Status.UpToDateReplicas, cur.Status.Versions
	}
	want := int32(1)
	if replicas != nil {
		want = *replicas
	}
	val := func(p *int32) int32 {
		if p == nil {
			return 0
		}
		return *p
	}
	switch {
	case observed < gen:
		return fmt.Sprintf("%s has not seen the change yet", st.Kind), nil
	case val(upToDate) != want || val(ready) != want || !onlyVersion(vs, o.Target, want):
		held, err := heldMachines(ctx, c, st.obj.GetNamespace(), owner)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d of %d machines up to date, %d Ready; versions: %s%s", val(upToDate), want, val(ready), versionsOrNone(vs), held), nil
	}
	return "", nil
}

// heldMachines says, for the step's machines that are not Ready or are
// being deleted, what holds each: a machine coming up by its Ready
// condition's message (the node, the infrastructure or the bootstrap data
// it waits for), a machine going away by its Deleting condition's, where
// Cluster API's machine controller names the stage and, while it drains,
// the pods that hold the drain (kubernetes-sigs/cluster-api v1.14.2,
// core/reconcilers/machine/machine_controller.go reconcileDelete and
// machine_controller_status.go setDeletingCondition). Counts alone read
// the same for a new machine that never turns Ready and an old one whose
// drain never ends ("1 of 1 machines up to date, 1 Ready").
func heldMachines(ctx context.Context, c client.Client, namespace string, owner client.MatchingLabels) (string, error) {
	machines := &clusterv1.MachineList{}
	if err := c.List(ctx, machines, client.InNamespace(namespace), owner); err != nil {
		return "", err
	}
	var held []string
	for _, m := range machines.Items {
		ready := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineReadyCondition)
		deleting := !m.DeletionTimestamp.IsZero()
		if !deleting && ready != nil && ready.Status == metav1.ConditionTrue {
			continue
		}
		why, cond := "no Ready condition yet", ready
		if deleting {
			why, cond = "deleting", meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineDeletingCondition)
		}
		if cond != nil {
			msg := strings.Join(strings.Fields(cond.Message), " ")
			if msg == "" {
				msg = cond.Reason
			}
			why = strings.TrimPrefix(why+": "+msg, "no Ready condition yet: ")
		}
		held = append(held, fmt.Sprintf("%s (%s)", m.Name, why))
	}
	if len(held) == 0 {
		return "", nil
	}
	sort.Strings(held)
	return "; " + strings.Join(held, "; "), nil
}

// onlyVersion: every replica runs v (a MachinePool may report no versions:
// its replicas then count).
func onlyVersion(vs []clusterv1.StatusVersion, v string, n int32) bool {
	if len(vs) == 0 {
		return true
	}
	return len(vs) == 1 && vs[0].Version == v && vs[0].Replicas == n
}

func versionsOrNone(vs []clusterv1.StatusVersion) string {
	if len(vs) == 0 {
		return "none reported"
	}
	return versions(vs)
}

func yamlOf(obj client.Object) (string, error) {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	// What the API server keeps is not part of a manifest.
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "  creationTimestamp:") || strings.HasPrefix(line, "status:") || line == "  managedFields:" {
			continue
		}
		out = append(out, line)
	}
	return "# new template: kubectl apply -f <this file>\n" + strings.Join(out, "\n") + "---\n", nil
}
