package winupgrade

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/naming"
)

// Pool is a Windows pool of the cluster and the one that replaces it.
type Pool struct {
	// Kind is MachineDeployment or MachinePool.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// From is the old pool's Windows Server release.
	From     infrav1.WindowsServerVersion `json:"from"`
	Replicas int32                        `json:"replicas"`
	// NewName names the new pool and its templates.
	NewName string `json:"newName,omitempty"`
	// Manifest is the new pool, ready to apply (YAML documents).
	Manifest string `json:"manifest,omitempty"`
}

const bootstrapGroupVersion = "bootstrap.cluster.x-k8s.io/v1beta2"

// newPoolName names the replacement of pool old: its release's year
// swapped for the target's when the name has one ("win-2019" ->
// "win-2022"), otherwise "-ws<year>" appended. A Windows scale set's
// computer-name prefix is "win-" and the last five characters of a long
// pool name, so the suffix ("s2022") keeps new pools apart from old ones.
func newPoolName(old string, from, target infrav1.WindowsServerVersion) string {
	if from != "" && strings.Contains(old, string(from)) {
		return strings.Replace(old, string(from), string(target), 1)
	}
	name := old + "-ws" + string(target)
	if len(name) > 63 {
		name = strings.TrimRight(old[:63-len("-ws"+string(target))], "-.") + "-ws" + string(target)
	}
	return name
}

var (
	amtGVK = infrav1.GroupVersion.WithKind("AzureMachineTemplate")
	ampGVK = infrav1.GroupVersion.WithKind("AzureMachinePool")
)

func get(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
}

// windowsVersion is a VM spec's Windows release as its template pins it
// ("" when unset) and whether it is Windows at all.
func windowsVersion(u *unstructured.Unstructured, path ...string) (infrav1.WindowsServerVersion, bool) {
	os, _, _ := unstructured.NestedString(u.Object, append(path, "osDisk", "osType")...)
	if os != string(infrav1.Windows) {
		return "", false
	}
	v, _, _ := unstructured.NestedString(u.Object, append(path, "windowsServerVersion")...)
	return infrav1.WindowsServerVersion(v), true
}

// runningRelease is the release a pool whose template pins none runs now.
// Its machines boot the provider's default only if they were created
// after that default was set: the pool may still run the default of its
// time (Windows Server 2019 for pools CAPZ created), so its nodes' builds
// decide, then its image's name. A pool whose nodes run two releases is
// left by the nodes not of the target.
func (pl *planner) runningRelease(u *unstructured.Unstructured, object string, nodes []string, path ...string) (infrav1.WindowsServerVersion, error) {
	var img *infrav1.Image
	if m, ok, _ := unstructured.NestedMap(u.Object, append(path, "image")...); ok {
		img = &infrav1.Image{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, img); err != nil {
			return "", fmt.Errorf("reading the image of %s: %w", object, err)
		}
	}
	builds := map[string]string{}
	for _, name := range nodes {
		for i := range pl.s.nodes {
			if n := &pl.s.nodes[i]; n.Name == name {
				builds[name] = build(n)
			}
		}
	}
	pr := images.RunningRelease(img, builds)
	rel := pr.Release
	if rel == "" {
		for r := range pr.Nodes {
			if r != pl.o.Target && (rel == "" || r < rel) {
				rel = r
			}
		}
		pl.add(Finding{Check: CheckPools, Severity: doctor.Warning, Object: object,
			Message: fmt.Sprintf("its template does not pin windowsServerVersion and its nodes run two releases, %s: the new pool replaces the whole pool", pr.Releases()),
			Fix:     "check that the workloads on its Windows Server " + string(pl.o.Target) + " nodes may move too"})
		return rel, nil
	}
	if rel != pl.o.Target {
		pl.add(Finding{Check: CheckPools, Severity: doctor.Info, Object: object,
			Message: fmt.Sprintf("its template does not pin windowsServerVersion: it runs Windows Server %s, %s", rel, pr.Why)})
	}
	return rel, nil
}

// poolNodes are the names of the nodes of a MachineDeployment's or
// MachinePool's Machines (the Machines Cluster API labels with the pool's
// name: cluster-api v1.14.2 core/reconcilers/machinepool @027f2a36 formats
// a MachinePool's) and a MachinePool's status.nodeRefs.
func (pl *planner) poolNodes(ctx context.Context, label, value string, refs []corev1.ObjectReference) ([]string, error) {
	ms := &clusterv1.MachineList{}
	if err := pl.o.Management.List(ctx, ms, client.InNamespace(pl.o.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: pl.o.ClusterName, label: value}); err != nil {
		return nil, fmt.Errorf("listing the cluster's Machines: %w", err)
	}
	var names []string
	for i := range ms.Items {
		if r := ms.Items[i].Status.NodeRef; r.IsDefined() {
			names = append(names, r.Name)
		}
	}
	for _, r := range refs {
		names = append(names, r.Name)
	}
	return names, nil
}

// pools writes a new pool beside each Windows pool of another release.
func (pl *planner) pools(ctx context.Context) error {
	c, ns := pl.o.Management, pl.o.Namespace
	sel := client.MatchingLabels{clusterv1.ClusterNameLabel: pl.o.ClusterName}
	mds := &clusterv1.MachineDeploymentList{}
	if err := c.List(ctx, mds, client.InNamespace(ns), sel); err != nil {
		return fmt.Errorf("listing the cluster's MachineDeployments: %w", err)
	}
	for i := range mds.Items {
		md := &mds.Items[i]
		ref := md.Spec.Template.Spec.InfrastructureRef
		if ref.Kind != "AzureMachineTemplate" || ref.APIGroup != infrav1.GroupVersion.Group {
			continue
		}
		amt, err := get(ctx, c, amtGVK, ns, ref.Name)
		if err != nil {
			return fmt.Errorf("reading AzureMachineTemplate %s/%s of MachineDeployment %s: %w", ns, ref.Name, md.Name, err)
		}
		from, windows := windowsVersion(amt, "spec", "template", "spec")
		if windows && from == "" {
			nodes, err := pl.poolNodes(ctx, clusterv1.MachineDeploymentNameLabel, md.Name, nil)
			if err != nil {
				return err
			}
			if from, err = pl.runningRelease(amt, "MachineDeployment/"+ns+"/"+md.Name, nodes, "spec", "template", "spec"); err != nil {
				return err
			}
		}
		if !windows || from == pl.o.Target {
			continue
		}
		p := Pool{Kind: "MachineDeployment", Name: md.Name, From: from, NewName: newPoolName(md.Name, from, pl.o.Target)}
		if md.Spec.Replicas != nil {
			p.Replicas = *md.Spec.Replicas
		}
		if md.Labels[clusterv1.ClusterTopologyOwnedLabel] != "" {
			pl.add(Finding{Check: CheckPools, Severity: doctor.Warning, Object: "MachineDeployment/" + ns + "/" + md.Name,
				Message: fmt.Sprintf("MachineDeployment %s is managed by the Cluster's topology (ClusterClass)", md.Name),
				Fix:     fmt.Sprintf("add a machineDeployment of a class whose AzureMachineTemplate sets windowsServerVersion: %q to the Cluster's topology, then remove the old one", pl.o.Target)})
			continue
		}
		kct, err := get(ctx, c, schema.FromAPIVersionAndKind(bootstrapGroupVersion, md.Spec.Template.Spec.Bootstrap.ConfigRef.Kind), ns, md.Spec.Template.Spec.Bootstrap.ConfigRef.Name)
		if err != nil {
			return fmt.Errorf("reading the bootstrap template of MachineDeployment %s: %w", md.Name, err)
		}
		mdu := &unstructured.Unstructured{}
		mdu.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("MachineDeployment"))
		if err := c.Get(ctx, client.ObjectKeyFromObject(md), mdu); err != nil {
			return err
		}
		renames := map[string]string{md.Name: p.NewName, amt.GetName(): p.NewName, kct.GetName(): p.NewName,
			amt.GetName() + "-azure-json": p.NewName + "-azure-json"}
		if err := pl.retarget(amt, "spec", "template", "spec"); err != nil {
			return err
		}
		if p.Manifest, err = manifest(pl.o.Target, p, renames, amt, kct, mdu); err != nil {
			return err
		}
		pl.p.Pools = append(pl.p.Pools, p)
	}
	return pl.machinePools(ctx)
}

func (pl *planner) machinePools(ctx context.Context) error {
	c, ns := pl.o.Management, pl.o.Namespace
	mps := &clusterv1.MachinePoolList{}
	if err := c.List(ctx, mps, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: pl.o.ClusterName}); err != nil {
		if apierrors.IsNotFound(err) || strings.Contains(err.Error(), "no matches for kind") {
			return nil // MachinePools are not installed
		}
		return fmt.Errorf("listing the cluster's MachinePools: %w", err)
	}
	amps := &infrav1.AzureMachinePoolList{}
	if err := c.List(ctx, amps, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: pl.o.ClusterName}); err != nil {
		return fmt.Errorf("listing the cluster's AzureMachinePools: %w", err)
	}
	for i := range mps.Items {
		mp := &mps.Items[i]
		ref := mp.Spec.Template.Spec.InfrastructureRef
		if ref.Kind != "AzureMachinePool" || ref.APIGroup != infrav1.GroupVersion.Group {
			continue
		}
		amp, err := get(ctx, c, ampGVK, ns, ref.Name)
		if err != nil {
			return fmt.Errorf("reading AzureMachinePool %s/%s of MachinePool %s: %w", ns, ref.Name, mp.Name, err)
		}
		from, windows := windowsVersion(amp, "spec", "template")
		if windows && from == "" {
			nodes, err := pl.poolNodes(ctx, clusterv1.MachinePoolNameLabel, format.MustFormatValue(mp.Name), mp.Status.NodeRefs)
			if err != nil {
				return err
			}
			if from, err = pl.runningRelease(amp, "MachinePool/"+ns+"/"+mp.Name, nodes, "spec", "template"); err != nil {
				return err
			}
		}
		if !windows || from == pl.o.Target {
			continue
		}
		p := Pool{Kind: "MachinePool", Name: mp.Name, From: from, NewName: newPoolName(mp.Name, from, pl.o.Target)}
		if mp.Spec.Replicas != nil {
			p.Replicas = *mp.Spec.Replicas
		}
		newAMP := newPoolName(amp.GetName(), from, pl.o.Target)
		// The new scale set's computer-name prefix must be valid and
		// differ from every other pool's of the cluster.
		prefix := naming.WindowsScaleSetPrefix(newAMP)
		if err := naming.ValidateWindowsComputerName(prefix); err != nil {
			pl.add(Finding{Check: CheckPools, Severity: doctor.Error, Object: "AzureMachinePool/" + ns + "/" + amp.GetName(),
				Message: fmt.Sprintf("the new pool's name %s gives the computer-name prefix %q: %v", newAMP, prefix, err), Fix: "rename it in the written manifest"})
		}
		for j := range amps.Items {
			if other := &amps.Items[j]; naming.WindowsScaleSetPrefix(other.Name) == prefix && other.Spec.Template.OS() == infrav1.Windows {
				pl.add(Finding{Check: CheckPools, Severity: doctor.Error, Object: "AzureMachinePool/" + ns + "/" + amp.GetName(),
					Message: fmt.Sprintf("the new pool %s would have the Windows computer-name prefix %q of AzureMachinePool %s", newAMP, prefix, other.Name),
					Fix:     "give it a name whose last five characters differ from every Windows pool's of the cluster"})
			}
		}
		kc, err := get(ctx, c, schema.FromAPIVersionAndKind(bootstrapGroupVersion, mp.Spec.Template.Spec.Bootstrap.ConfigRef.Kind), ns, mp.Spec.Template.Spec.Bootstrap.ConfigRef.Name)
		if err != nil {
			return fmt.Errorf("reading the bootstrap config of MachinePool %s: %w", mp.Name, err)
		}
		mpu := &unstructured.Unstructured{}
		mpu.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("MachinePool"))
		if err := c.Get(ctx, client.ObjectKeyFromObject(mp), mpu); err != nil {
			return err
		}
		unstructured.RemoveNestedField(amp.Object, "spec", "providerID")
		unstructured.RemoveNestedField(amp.Object, "spec", "providerIDList")
		unstructured.RemoveNestedField(mpu.Object, "spec", "providerIDList")
		renames := map[string]string{mp.Name: p.NewName, amp.GetName(): newAMP, kc.GetName(): p.NewName,
			amp.GetName() + "-azure-json": newAMP + "-azure-json"}
		if err := pl.retarget(amp, "spec", "template"); err != nil {
			return err
		}
		if p.Manifest, err = manifest(pl.o.Target, p, renames, amp, kc, mpu); err != nil {
			return err
		}
		pl.p.Pools = append(pl.p.Pools, p)
	}
	return nil
}

// retarget sets a VM spec's release to the target; an image named
// explicitly is dropped, so that the default image of the target is used.
func (pl *planner) retarget(u *unstructured.Unstructured, path ...string) error {
	if img, ok, _ := unstructured.NestedFieldNoCopy(u.Object, append(path, "image")...); ok && img != nil {
		unstructured.RemoveNestedField(u.Object, append(path, "image")...)
		pl.add(Finding{Check: CheckPools, Severity: doctor.Warning, Object: u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName(),
			Message: fmt.Sprintf("%s %s names its image, which is of the old release: the new pool's leaves it out, so the default Windows Server %s image is used", u.GetKind(), u.GetName(), pl.o.Target),
			Fix:     "set the image of your Windows Server " + string(pl.o.Target) + " build in the written manifest if you use your own"})
	}
	return unstructured.SetNestedField(u.Object, string(pl.o.Target), append(path, "windowsServerVersion")...)
}

// manifest writes objects as new objects: their names changed by renames
// (in every string field, so references follow), and what the API server
// and controllers keep (status, uid, owners, revisions) dropped.
func manifest(target infrav1.WindowsServerVersion, p Pool, renames map[string]string, objs ...*unstructured.Unstructured) (string, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Windows Server %s %s %s, replacing %s (Windows Server %s), written by 'winkube plan windows-upgrade'.\n", target, p.Kind, p.NewName, p.Name, p.From)
	fmt.Fprintf(&b, "# Apply it, wait until its nodes are Ready, move the workloads, then scale %s to 0:\n", p.Name)
	fmt.Fprintf(&b, "#   kubectl scale %s %s --replicas 0\n", strings.ToLower(p.Kind), p.Name)
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetAPIVersion(o.GetAPIVersion())
		u.SetKind(o.GetKind())
		u.SetName(renames[o.GetName()])
		u.SetNamespace(o.GetNamespace())
		if l := o.GetLabels(); len(l) > 0 {
			u.SetLabels(l)
		}
		ann := o.GetAnnotations()
		for k := range ann {
			if k == "kubectl.kubernetes.io/last-applied-configuration" || strings.Contains(k, "x-k8s.io/") {
				delete(ann, k)
			}
		}
		if len(ann) > 0 {
			u.SetAnnotations(ann)
		}
		if spec, ok := o.Object["spec"]; ok {
			u.Object["spec"] = rename(spec, renames)
		}
		if md := u.Object["metadata"].(map[string]any); md["labels"] != nil {
			md["labels"] = rename(md["labels"], renames)
		}
		out, err := yaml.Marshal(u.Object)
		if err != nil {
			return "", err
		}
		b.WriteString("---\n")
		b.Write(out)
	}
	return b.String(), nil
}

func rename(v any, renames map[string]string) any {
	switch x := v.(type) {
	case string:
		if n, ok := renames[x]; ok {
			return n
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = rename(e, renames)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rename(e, renames)
		}
		return out
	}
	return v
}
