package controllers_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/poll"
)

func (f *fixture) newPool(name string, replicas int32, windows bool, mutate ...func(*clusterv1.MachinePool)) (*clusterv1.MachinePool, *infrav1.AzureMachinePool) {
	f.t.Helper()
	tmpl := infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}
	if windows {
		tmpl.OSDisk.OSType = infrav1.Windows
	}
	return f.newPoolOf(name, replicas, tmpl, mutate...)
}

// readyPool is newPool, waited for until it is Ready with its replicas.
func (f *fixture) readyPool(name string, replicas int32, windows bool, mutate ...func(*clusterv1.MachinePool)) (*clusterv1.MachinePool, *infrav1.AzureMachinePool) {
	f.t.Helper()
	mp, amp := f.newPool(name, replicas, windows, mutate...)
	f.waitPool(amp, replicas)
	return mp, amp
}

// newPoolOf is newPool with the pool's VM template.
func (f *fixture) newPoolOf(name string, replicas int32, tmpl infrav1.AzureVMSpec, mutate ...func(*clusterv1.MachinePool)) (*clusterv1.MachinePool, *infrav1.AzureMachinePool) {
	f.t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: f.ns}, Data: map[string][]byte{"value": []byte("<powershell>kubeadm join</powershell>")}}
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: f.cluster.Name, Replicas: ptr.To(replicas),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: f.cluster.Name, Version: "v1.36.3",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(secret.Name)},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachinePool", Name: name},
			}},
		},
	}
	for _, m := range mutate {
		m(mp)
	}
	for _, o := range []client.Object{secret, mp} {
		if err := env.Client.Create(f.ctx, o); err != nil {
			f.t.Fatal(err)
		}
	}
	amp := &infrav1.AzureMachinePool{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: f.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: name, UID: mp.UID}},
		},
		Spec: infrav1.AzureMachinePoolSpec{Template: tmpl},
	}
	if err := env.Client.Create(f.ctx, amp); err != nil {
		f.t.Fatal(err)
	}
	return mp, amp
}

type vmssInstance struct {
	id, computerName, imageVersion string
	latest                         bool
}

func (a *azure) instances(rg, vmss string) []vmssInstance {
	var out []vmssInstance
	p := a.vmssVMs.NewListPager(rg, vmss, nil)
	for p.More() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			return nil
		}
		for _, v := range page.Value {
			// A marketplace image's version, or a community gallery
			// image's (the last segment of its ID).
			img := v.Properties.StorageProfile.ImageReference
			version := ptr.Deref(img.Version, "")
			if id := ptr.Deref(img.CommunityGalleryImageID, ""); id != "" {
				version = id[strings.LastIndex(id, "/")+1:]
			}
			out = append(out, vmssInstance{*v.InstanceID, *v.Properties.OSProfile.ComputerName, version, *v.Properties.LatestModelApplied})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return len(out[i].id) < len(out[j].id) || len(out[i].id) == len(out[j].id) && out[i].id < out[j].id
	})
	return out
}

func instanceIDs(in []vmssInstance) string {
	var s []string
	for _, i := range in {
		s = append(s, i.id)
	}
	return strings.Join(s, ",")
}

// waitPool waits for the pool to be Ready with n replicas.
func (f *fixture) waitPool(amp *infrav1.AzureMachinePool, n int32) {
	f.t.Helper()
	env.Until(f.t, 2*time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKeyFromObject(amp), amp); err != nil {
			return err.Error()
		}
		if !conditions.IsTrue(amp, "Ready") || amp.Status.Replicas != n || len(amp.Spec.ProviderIDList) != int(n) {
			return fmt.Sprintf("pool: replicas %d, %d provider IDs, conditions %+v; want %d and Ready", amp.Status.Replicas, len(amp.Spec.ProviderIDList), amp.Status.Conditions, n)
		}
		return ""
	})
}

// setPoolVMSize changes the pool's VM size, a new model.
func (f *fixture) setPoolVMSize(amp *infrav1.AzureMachinePool, size string) {
	f.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(amp), amp); err != nil {
			return err
		}
		amp.Spec.Template.VMSize = size
		return env.Client.Update(f.ctx, amp)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) poolMachines(pool string) []infrav1.AzureMachinePoolMachine {
	list := &infrav1.AzureMachinePoolMachineList{}
	if err := env.Client.List(f.ctx, list, client.InNamespace(f.ns), client.MatchingLabels{infrav1.MachinePoolNameLabel: pool}); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func TestWindowsMachinePool(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	f, az := provisionedCluster(t, "pools")
	mp, amp := f.readyPool("windows-pool-abcde", 3, true)

	if amp.Status.ComputerNamePrefix != "win-abcde" {
		t.Fatalf("computer-name prefix %q, want win-abcde", amp.Status.ComputerNamePrefix)
	}
	insts := az.instances(f.ns, amp.Name)
	for _, in := range insts {
		if !strings.HasPrefix(in.computerName, "win-abcde") || len(in.computerName) > 15 {
			t.Fatalf("instance computer name %q", in.computerName)
		}
		if in.imageVersion != "1.36.3" {
			t.Fatalf("instance image version %q, want the community gallery's v1.36.3 Windows image", in.imageVersion)
		}
	}
	pms := f.poolMachines(amp.Name)
	if n := len(pms); n != 3 {
		t.Fatalf("%d AzureMachinePoolMachines for 3 instances", n)
	}
	// Cluster API's MachinePool controller reads the deprecated ready
	// field, and its Machine controller must be able to take control of
	// each instance's machine.
	if !amp.Status.Ready {
		t.Error("a provisioned pool does not say status.ready, which Cluster API v1.14's MachinePool controller reads")
	}
	for _, pm := range pms {
		if ref := metav1.GetControllerOf(&pm); ref != nil {
			t.Errorf("%s is controlled by %s %s: the Machine Cluster API makes for it could not take control", pm.Name, ref.Kind, ref.Name)
		}
		if len(pm.OwnerReferences) != 1 || pm.OwnerReferences[0].UID != amp.UID {
			t.Errorf("%s is not owned by its pool: %+v", pm.Name, pm.OwnerReferences)
		}
	}
	if amp.Status.InfrastructureMachineKind != "AzureMachinePoolMachine" {
		t.Fatal("the pool does not opt in to MachinePool Machines")
	}

	scale := func(n int32) {
		t.Helper()
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(mp), mp); err != nil {
			t.Fatal(err)
		}
		mp.Spec.Replicas = ptr.To(n)
		if err := env.Client.Update(f.ctx, mp); err != nil {
			t.Fatal(err)
		}
	}
	scale(5)
	f.waitPool(amp, 5)
	if got := instanceIDs(az.instances(f.ns, amp.Name)); got != "0,1,2,3,4" {
		t.Fatalf("after scaling to 5: instances %s", got)
	}

	// Cluster API chooses instances 1 and 3 (delete-machine annotation);
	// scaling to 2 removes them and then the oldest.
	for _, m := range f.poolMachines(amp.Name) {
		if m.Spec.InstanceID == "1" || m.Spec.InstanceID == "3" {
			// The controller writes these objects too: retry on conflict.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(&m), &m); err != nil {
					return err
				}
				m.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: ""}
				return env.Client.Update(f.ctx, &m)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	scale(2)
	f.waitPool(amp, 2)
	if got := instanceIDs(az.instances(f.ns, amp.Name)); got != "2,4" {
		t.Fatalf("after scaling to 2: instances %s, want 2,4 (1 and 3 chosen, then the oldest)", got)
	}
	nicPager := az.nics.NewListVirtualMachineScaleSetNetworkInterfacesPager(f.ns, amp.Name, nil)
	nics := 0
	for nicPager.More() {
		page, err := nicPager.NextPage(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		nics += len(page.Value)
	}
	if nics != 2 {
		t.Fatalf("%d instance NICs for 2 instances: orphans", nics)
	}

	// A Kubernetes version change rolls the instances one at a time: never
	// more than one above the wanted count, never fewer than it.
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(mp), mp); err != nil {
		t.Fatal(err)
	}
	mp.Spec.Template.Spec.Version = "v1.35.4"
	if err := env.Client.Update(f.ctx, mp); err != nil {
		t.Fatal(err)
	}
	maxSeen, minSeen := 0, 100
	poll.Until(t, 2*time.Minute, func() string {
		insts := az.instances(f.ns, amp.Name)
		live := len(insts)
		if live > maxSeen {
			maxSeen = live
		}
		if live < minSeen {
			minSeen = live
		}
		for _, in := range insts {
			if in.imageVersion != "1.35.4" || !in.latest {
				return fmt.Sprintf("still rolling: %+v", insts)
			}
		}
		if len(insts) != 2 {
			return fmt.Sprintf("%d instances", len(insts))
		}
		return ""
	})
	t.Logf("during the roll: between %d and %d instances", minSeen, maxSeen)
	if got := instanceIDs(az.instances(f.ns, amp.Name)); got == "2,4" {
		t.Fatal("the roll did not replace the instances")
	}
	if maxSeen > 3 {
		t.Fatalf("%d instances at once during the roll; maxSurge 1 allows 3", maxSeen)
	}
	if minSeen < 2 {
		t.Fatalf("%d instances at once during the roll; maxUnavailable 0 needs 2", minSeen)
	}
	f.waitPool(amp, 2)

	// Deleting the pool deletes the scale set and its instance objects.
	f.deleteAndWait(time.Minute, amp)
	if _, err := az.vmss.Get(f.ctx, f.ns, amp.Name, nil); err == nil {
		t.Fatal("the scale set outlived its pool")
	}
	if n := len(f.poolMachines(amp.Name)); n != 0 {
		t.Fatalf("%d AzureMachinePoolMachines outlived their pool", n)
	}
	if inv := az.inventory(f.ns); len(inv["virtualMachineScaleSets"]) != 0 {
		t.Fatalf("left: %v", inv)
	}
}

// A new join token (Cluster API's bootstrap provider rewrites a pool's
// custom data at half the token's lifetime) replaces no instance, even when
// a scale-up then sends it to Azure; a new VM size replaces them all.
func TestPoolRollsForItsModelNotForANewJoinToken(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	f, az := provisionedCluster(t, "tokens")
	mp, amp := f.readyPool("tokens-pool-abcde", 2, true)
	before := instanceIDs(az.instances(f.ns, amp.Name))
	customData := func() string {
		set, err := az.vmss.Get(f.ctx, f.ns, amp.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(set.Tags["winkube.dev_customdata"], "")
	}
	first := customData()

	secret := &corev1.Secret{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: *mp.Spec.Template.Spec.Bootstrap.DataSecretName}, secret); err != nil {
		t.Fatal(err)
	}
	secret.Data["value"] = []byte("<powershell>kubeadm join --token abcdef.rotated</powershell>")
	if err := env.Client.Update(f.ctx, secret); err != nil {
		t.Fatal(err)
	}
	f.setPoolReplicas(mp, 3)
	f.waitPool(amp, 3)
	after := instanceIDs(az.instances(f.ns, amp.Name))
	if !strings.HasPrefix(after, before+",") {
		t.Fatalf("instances %s after a new join token and a scale-up, before %s: some were replaced", after, before)
	}
	if customData() == first {
		t.Error("the scale-up did not send the new custom data")
	}

	f.setPoolVMSize(amp, "Standard_D8s_v3")
	poll.Until(t, 3*time.Minute, func() string {
		insts := az.instances(f.ns, amp.Name)
		for _, in := range insts {
			if strings.Contains(","+after+",", ","+in.id+",") {
				return fmt.Sprintf("instance %s of the old size is still there: %s", in.id, instanceIDs(insts))
			}
		}
		if len(insts) != 3 {
			return fmt.Sprintf("%d instances", len(insts))
		}
		return ""
	})
	f.waitPool(amp, 3)
}
