package localworld_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
)

// checkPoolAndReplacement runs, in a booted world, two things only Cluster
// API's own controllers show: a MachinePool whose join token Cluster API
// rotates (the world's short token lifetime makes it happen within the
// test) replaces none of its instances; and a Windows worker whose VM is
// deleted outside winkube is replaced by a real MachineHealthCheck: its
// kubelet falls silent, the cloud controller deletes the Node of a VM that
// no longer exists, the MachineHealthCheck finds the Machine's node gone
// and its MachineSet makes a new Machine, on a new VM. The two run side by
// side, as they would in a cluster.
func checkPoolAndReplacement(ctx context.Context, t *testing.T, w *localworld.World, o localworld.Options, cs kubernetes.Interface, start time.Time) {
	t.Helper()
	pool := startWindowsPool(ctx, t, w, o)
	replaceVanishedVM(ctx, t, w, cs, start)
	rotateWithoutReplacing(ctx, t, w, cs, pool, start)
}

// startWindowsPool applies the machinepool-windows flavor's pool, of one
// instance, beside the world's MachineDeployments.
func startWindowsPool(ctx context.Context, t *testing.T, w *localworld.World, o localworld.Options) string {
	t.Helper()
	pub, err := os.ReadFile(filepath.Join(o.StateDir, localworld.SSHKeyFile+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	fo := o.ClusterOptions(strings.TrimSpace(string(pub)))
	fo.WindowsNodes = 1
	objs, err := flavors.Generate(flavors.MachinePoolWindows, fo)
	if err != nil {
		t.Fatal(err)
	}
	name := o.Name + "-mp-win"
	applied := 0
	for _, obj := range objs {
		switch obj.(type) {
		case *clusterv1.MachinePool, *infrav1.AzureMachinePool, *bootstrapv1.KubeadmConfig:
			if obj.GetName() != name {
				continue
			}
			if err := w.Client.Create(ctx, obj); err != nil {
				t.Fatalf("apply %T %s: %v", obj, name, err)
			}
			applied++
		}
	}
	if applied != 3 {
		t.Fatalf("the flavor's pool has %d of its 3 objects", applied)
	}
	return name
}

func replaceVanishedVM(ctx context.Context, t *testing.T, w *localworld.World, cs kubernetes.Interface, start time.Time) {
	t.Helper()
	const md = "e2e-md-win"
	mhc := &clusterv1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: md}, Spec: clusterv1.MachineHealthCheckSpec{
		ClusterName: "e2e",
		Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md}},
		// The checks of Cluster API's and CAPZ's examples.
		Checks: clusterv1.MachineHealthCheckChecks{NodeStartupTimeoutSeconds: ptr.To[int32](600), UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To[int32](300)},
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](300)},
		}},
	}}
	if err := w.Client.Create(ctx, mhc); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if err := w.Client.Get(ctx, client.ObjectKeyFromObject(mhc), mhc); err != nil {
			return err.Error()
		}
		if h := mhc.Status.CurrentHealthy; h == nil || *h != 1 {
			return fmt.Sprintf("MachineHealthCheck: %v healthy machines, want 1", h)
		}
		return ""
	})
	machine, am := theMachine(ctx, t, w, md)
	oldNode := machine.Status.NodeRef.Name
	ac := &infrav1.AzureCluster{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: machine.Spec.ClusterName}, ac); err != nil {
		t.Fatal(err)
	}
	cfg, err := w.AsServicePrincipal()
	if err != nil {
		t.Fatal(err)
	}
	vms, err := endpoint.NewClient(cfg, localworld.Subscription, armcompute.NewVirtualMachinesClient)
	if err != nil {
		t.Fatal(err)
	}
	rg, vm := ac.Spec.ResourceGroup, am.Status.VMName
	p, err := vms.BeginDelete(ctx, rg, vm, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 200 * time.Millisecond})
	}
	if err != nil {
		t.Fatalf("deleting VM %s outside winkube: %v", vm, err)
	}
	t.Logf("%6.1fs deleted VM %s of machine %s outside winkube", time.Since(start).Seconds(), vm, machine.Name)

	poll.Until(t, 5*time.Minute, func() string {
		m, _ := theMachine(ctx, t, w, md)
		if m.Name == machine.Name {
			return fmt.Sprintf("machine %s is not replaced yet", m.Name)
		}
		if m.Status.NodeRef.Name == "" {
			return fmt.Sprintf("the new machine %s has no node yet", m.Name)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, m.Status.NodeRef.Name, metav1.GetOptions{})
		if err != nil || !util.IsNodeReady(n) {
			return fmt.Sprintf("node %s of the new machine is not Ready (%v)", m.Status.NodeRef.Name, err)
		}
		return ""
	})
	// The chain, link by link: the provider said the VM was gone without
	// making it again, the cloud controller deleted the Node, the
	// MachineHealthCheck marked the Machine.
	evs := &corev1.EventList{}
	if err := w.Client.List(ctx, evs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == am.Name || e.InvolvedObject.Name == machine.Name {
			seen[e.Reason] = true
		}
	}
	if !seen[controllers.VMDeletedReason] || !seen["MachineMarkedUnhealthy"] {
		t.Errorf("events of the replaced machine: %v; want %s and MachineMarkedUnhealthy", seen, controllers.VMDeletedReason)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, oldNode, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the node %s of the deleted VM is still there (%v)", oldNode, err)
	}
	if _, err := vms.Get(ctx, rg, vm, nil); err == nil {
		t.Errorf("VM %s exists again", vm)
	}
	t.Logf("%6.1fs the MachineHealthCheck replaced machine %s", time.Since(start).Seconds(), machine.Name)
}

// theMachine is the one Machine of a MachineDeployment, and its
// AzureMachine.
func theMachine(ctx context.Context, t *testing.T, w *localworld.World, md string) (clusterv1.Machine, infrav1.AzureMachine) {
	t.Helper()
	var m clusterv1.Machine
	var am infrav1.AzureMachine
	poll.Until(t, time.Minute, func() string {
		ms := &clusterv1.MachineList{}
		if err := w.Client.List(ctx, ms, client.InNamespace("default"), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md}); err != nil {
			return err.Error()
		}
		var live []clusterv1.Machine
		for _, m := range ms.Items {
			if m.DeletionTimestamp.IsZero() {
				live = append(live, m)
			}
		}
		if len(live) != 1 {
			return fmt.Sprintf("%d machines of %s", len(live), md)
		}
		m = live[0]
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: m.Spec.InfrastructureRef.Name}, &am); err != nil {
			return err.Error()
		}
		return ""
	})
	return m, am
}

// rotateWithoutReplacing waits for the pool's instance, then for Cluster
// API to rotate the pool's join token, then for the old token to expire,
// and scales the pool up: the new instance can only join with the rotated
// token, which winkube sends with that write, and the first instance is
// the same throughout.
func rotateWithoutReplacing(ctx context.Context, t *testing.T, w *localworld.World, cs kubernetes.Interface, name string, start time.Time) {
	t.Helper()
	key := client.ObjectKey{Namespace: "default", Name: name}
	instances := func(n int) map[string]string {
		t.Helper()
		byNode := map[string]string{}
		poll.Until(t, 4*time.Minute, func() string {
			mp := &clusterv1.MachinePool{}
			if err := w.Client.Get(ctx, key, mp); err != nil {
				return err.Error()
			}
			if len(mp.Status.NodeRefs) != n {
				return fmt.Sprintf("pool %s has %d nodes, want %d", name, len(mp.Status.NodeRefs), n)
			}
			ms := &infrav1.AzureMachinePoolMachineList{}
			if err := w.Client.List(ctx, ms, client.InNamespace("default"), client.MatchingLabels{infrav1.MachinePoolNameLabel: name}); err != nil {
				return err.Error()
			}
			if len(ms.Items) != n {
				return fmt.Sprintf("%d AzureMachinePoolMachines, want %d", len(ms.Items), n)
			}
			clear(byNode)
			for _, ref := range mp.Status.NodeRefs {
				node, err := cs.CoreV1().Nodes().Get(ctx, ref.Name, metav1.GetOptions{})
				if err != nil || !util.IsNodeReady(node) {
					return fmt.Sprintf("node %s of the pool is not Ready (%v)", ref.Name, err)
				}
				byNode[node.Name] = node.Spec.ProviderID
			}
			return ""
		})
		return byNode
	}
	first := instances(1)
	t.Logf("%6.1fs pool %s: instance %v", time.Since(start).Seconds(), name, first)
	token := func() string {
		cfg := &bootstrapv1.KubeadmConfig{}
		if err := w.Client.Get(ctx, key, cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Spec.JoinConfiguration.Discovery.BootstrapToken.Token
	}
	old := token()
	poll.Until(t, 4*time.Minute, func() string {
		if token() == old {
			return "the pool's join token is not rotated yet"
		}
		return ""
	})
	t.Logf("%6.1fs Cluster API rotated the pool's join token", time.Since(start).Seconds())
	// The old token stops authenticating at its expiration (the API
	// server's bootstrap-token authenticator checks it).
	id, _, _ := strings.Cut(old, ".")
	poll.Until(t, 3*time.Minute, func() string {
		s, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, bootstrapapi.BootstrapTokenSecretPrefix+id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ""
		}
		if err != nil {
			return err.Error()
		}
		exp, err := time.Parse(time.RFC3339, string(s.Data[bootstrapapi.BootstrapTokenExpirationKey]))
		if err != nil {
			return err.Error()
		}
		if time.Now().Before(exp) {
			return "the old join token has not expired yet"
		}
		return ""
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mp := &clusterv1.MachinePool{}
		if err := w.Client.Get(ctx, key, mp); err != nil {
			return err
		}
		mp.Spec.Replicas = ptr.To[int32](2)
		return w.Client.Update(ctx, mp)
	})
	if err != nil {
		t.Fatal(err)
	}
	both := instances(2)
	for node, id := range first {
		if both[node] != id {
			t.Errorf("instance %s (node %s) was replaced after the token rotation: the pool now has %v", id, node, both)
		}
	}
	var names []string
	for n := range both {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%6.1fs pool %s scaled to %v with the rotated token, its first instance kept", time.Since(start).Seconds(), name, names)
}
