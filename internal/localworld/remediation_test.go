package localworld_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	certificatesv1 "k8s.io/api/certificates/v1"
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
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/rehearsal"
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
	lost := deleteAWorkersVM(ctx, t, w, start)
	rotateWithoutReplacing(ctx, t, w, cs, pool, start)
	lost.replaced(ctx, t, w, cs, start)
	brokenRolloutKeepsOldNodes(ctx, t, w, cs, pool, start)
}

// brokenRolloutKeepsOldNodes is issue 54's finding 3 in the world: the
// pool's bootstrap is broken as 'winkube rehearse bootstrap-failure
// unreachable-endpoint' breaks a machine's (Cluster API writes it into the
// pool's bootstrap data at its next token rotation), then a new Kubernetes
// version rolls the pool. The new instance is provisioned and never joins;
// with maxSurge 1 and maxUnavailable 0 no old instance goes, both old nodes
// stay Ready, and the pool's condition says the rollout waits for the new
// instance's node.
func brokenRolloutKeepsOldNodes(ctx context.Context, t *testing.T, w *localworld.World, cs kubernetes.Interface, name string, start time.Time) {
	t.Helper()
	key := client.ObjectKey{Namespace: "default", Name: name}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg := &bootstrapv1.KubeadmConfig{}
		if err := w.Client.Get(ctx, key, cfg); err != nil {
			return err
		}
		if err := rehearsal.Break(&cfg.Spec, rehearsal.UnreachableEndpoint, rehearsal.Options{Windows: true}); err != nil {
			t.Fatal(err)
		}
		return w.Client.Update(ctx, cfg)
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 3*time.Minute, func() string {
		cfg := &bootstrapv1.KubeadmConfig{}
		if err := w.Client.Get(ctx, key, cfg); err != nil {
			return err.Error()
		}
		secret := &corev1.Secret{}
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: cfg.Status.DataSecretName}, secret); err != nil {
			return err.Error()
		}
		if !strings.Contains(string(secret.Data["value"]), rehearsal.UnreachableAddress) {
			return "the pool's bootstrap data does not have the broken discovery yet"
		}
		return ""
	})
	old := map[string]bool{}
	for _, pm := range poolInstances(ctx, t, w, name) {
		old[pm.Spec.InstanceID] = true
	}
	t.Logf("%6.1fs pool %s: bootstrap broken (discovery at %s), rolling instances %v to v1.36.2", time.Since(start).Seconds(), name, rehearsal.UnreachableAddress, old)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mp := &clusterv1.MachinePool{}
		if err := w.Client.Get(ctx, key, mp); err != nil {
			return err
		}
		mp.Spec.Template.Spec.Version = "v1.36.2"
		return w.Client.Update(ctx, mp)
	})
	if err != nil {
		t.Fatal(err)
	}
	var msg string
	poll.Until(t, 4*time.Minute, func() string {
		fresh := ""
		for _, pm := range poolInstances(ctx, t, w, name) {
			switch {
			case old[pm.Spec.InstanceID] && !pm.DeletionTimestamp.IsZero():
				t.Fatalf("old instance %s of pool %s is being deleted while no new instance's node is Ready", pm.Spec.InstanceID, name)
			case !old[pm.Spec.InstanceID] && pm.Status.ProvisioningState == "Succeeded":
				fresh = pm.Spec.InstanceID
			}
		}
		if fresh == "" {
			return "no new instance provisioned yet"
		}
		amp := &infrav1.AzureMachinePool{}
		if err := w.Client.Get(ctx, key, amp); err != nil {
			return err.Error()
		}
		c := conditions.Get(amp, controllers.ReadyCondition)
		if c == nil || (c.Reason != controllers.WaitingForNodeReason && c.Reason != controllers.BootstrapFailedReason) || !strings.Contains(c.Message, "new instance") || !strings.Contains(c.Message, fresh) {
			return fmt.Sprintf("new instance %s provisioned; pool Ready %+v, want the rollout waiting for its node", fresh, c)
		}
		msg = c.Message
		return ""
	})
	t.Logf("%6.1fs pool %s: %s", time.Since(start).Seconds(), name, msg)
	mp := &clusterv1.MachinePool{}
	if err := w.Client.Get(ctx, key, mp); err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, ref := range mp.Status.NodeRefs {
		if node, err := cs.CoreV1().Nodes().Get(ctx, ref.Name, metav1.GetOptions{}); err == nil && util.IsNodeReady(node) {
			ready++
		}
	}
	if ready != len(old) {
		t.Errorf("pool %s has %d Ready nodes during the broken rollout, want its %d old ones", name, ready, len(old))
	}
	for _, pm := range poolInstances(ctx, t, w, name) {
		if old[pm.Spec.InstanceID] && !pm.DeletionTimestamp.IsZero() {
			t.Errorf("old instance %s of pool %s is being deleted", pm.Spec.InstanceID, name)
		}
	}
}

// poolInstances are a pool's AzureMachinePoolMachines.
func poolInstances(ctx context.Context, t *testing.T, w *localworld.World, name string) []infrav1.AzureMachinePoolMachine {
	t.Helper()
	ms := &infrav1.AzureMachinePoolMachineList{}
	if err := w.Client.List(ctx, ms, client.InNamespace("default"), client.MatchingLabels{infrav1.MachinePoolNameLabel: name}); err != nil {
		t.Fatal(err)
	}
	return ms.Items
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

// lostVM is a worker whose VM was deleted outside winkube.
type lostVM struct {
	md, rg, vm string
	machine    clusterv1.Machine
	am         infrav1.AzureMachine
	vms        *armcompute.VirtualMachinesClient
}

// deleteAWorkersVM puts a MachineHealthCheck (the checks of Cluster API's
// and CAPZ's examples) on the Windows MachineDeployment and deletes its
// machine's VM as someone with the cluster's credentials would, with the
// Azure SDK.
func deleteAWorkersVM(ctx context.Context, t *testing.T, w *localworld.World, start time.Time) *lostVM {
	t.Helper()
	const md = "e2e-md-win"
	mhc := &clusterv1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: md}, Spec: clusterv1.MachineHealthCheckSpec{
		ClusterName: "e2e",
		Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md}},
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
	l := &lostVM{md: md}
	l.machine, l.am = theMachine(ctx, t, w, md)
	ac := &infrav1.AzureCluster{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: l.machine.Spec.ClusterName}, ac); err != nil {
		t.Fatal(err)
	}
	cfg, err := w.AsServicePrincipal()
	if err != nil {
		t.Fatal(err)
	}
	if l.vms, err = endpoint.NewClient(cfg, localworld.Subscription, armcompute.NewVirtualMachinesClient); err != nil {
		t.Fatal(err)
	}
	l.rg, l.vm = ac.Spec.ResourceGroup, l.am.Status.VMName
	p, err := l.vms.BeginDelete(ctx, l.rg, l.vm, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 200 * time.Millisecond})
	}
	if err != nil {
		t.Fatalf("deleting VM %s outside winkube: %v", l.vm, err)
	}
	t.Logf("%6.1fs deleted VM %s of machine %s outside winkube", time.Since(start).Seconds(), l.vm, l.machine.Name)
	return l
}

// replaced waits for the machine's replacement and checks the chain, link
// by link: the provider said the VM was gone without making it again, the
// cloud controller deleted the Node, the MachineHealthCheck marked the
// Machine.
func (l *lostVM) replaced(ctx context.Context, t *testing.T, w *localworld.World, cs kubernetes.Interface, start time.Time) {
	t.Helper()
	poll.Until(t, 5*time.Minute, func() string {
		m, _ := theMachine(ctx, t, w, l.md)
		if m.Name == l.machine.Name {
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
	evs := &corev1.EventList{}
	if err := w.Client.List(ctx, evs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == l.am.Name || e.InvolvedObject.Name == l.machine.Name {
			seen[e.Reason] = true
		}
	}
	if !seen[controllers.VMDeletedReason] || !seen["MachineMarkedUnhealthy"] {
		t.Errorf("events of the replaced machine: %v; want %s and MachineMarkedUnhealthy", seen, controllers.VMDeletedReason)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, l.machine.Status.NodeRef.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the node %s of the deleted VM is still there (%v)", l.machine.Status.NodeRef.Name, err)
	}
	if _, err := l.vms.Get(ctx, l.rg, l.vm, nil); err == nil {
		t.Errorf("VM %s exists again", l.vm)
	}
	t.Logf("%6.1fs the MachineHealthCheck replaced machine %s", time.Since(start).Seconds(), l.machine.Name)
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
// API to rotate the pool's join token, and scales the pool up: the first
// instance is the same throughout, and the new one joins with the rotated
// token, which winkube sends with that write.
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
	// The new instance joined with the rotated token: its kubelet's
	// bootstrap CSR was made as that token's user (the API server's
	// bootstrap-token authenticator names it system:bootstrap:<id>).
	newID, _, _ := strings.Cut(token(), ".")
	var added []string
	for n := range both {
		if _, ok := first[n]; !ok {
			added = append(added, n)
		}
	}
	if len(added) != 1 {
		t.Fatalf("nodes before %v, after %v: want one more", first, both)
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var by []string
	for _, c := range csrs.Items {
		block, _ := pem.Decode(c.Spec.Request)
		if block == nil {
			continue
		}
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err == nil && c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && req.Subject.CommonName == "system:node:"+added[0] {
			by = append(by, c.Spec.Username)
		}
	}
	if len(by) == 0 || slices.ContainsFunc(by, func(u string) bool { return u != bootstrapapi.BootstrapUserPrefix+newID }) {
		t.Errorf("node %s's bootstrap CSRs were made by %v, want %s (the rotated token; the first was %s)", added[0], by, bootstrapapi.BootstrapUserPrefix+newID, old)
	}
	names := append([]string(nil), added...)
	for n := range first {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%6.1fs pool %s scaled to %v, the new instance joining with the rotated token, the first kept", time.Since(start).Seconds(), name, names)
}
