package controllers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	azruntime "github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
)

// apiFaults makes the controllers' reads (Get) of chosen kinds fail as an
// API server in trouble would (503), for as long as they are set.
type apiFaults struct {
	mu    sync.Mutex
	kinds map[string]bool
	hits  map[string]int64
}

func (a *apiFaults) set(kinds ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.kinds = map[string]bool{}
	for _, k := range kinds {
		a.kinds[k] = true
	}
}

// count is how many reads of kind have been failed so far.
func (a *apiFaults) count(kind string) func() int64 {
	return func() int64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.hits[kind]
	}
}

func (a *apiFaults) fail(kind string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.kinds[kind] {
		return false
	}
	if a.hits == nil {
		a.hits = map[string]int64{}
	}
	a.hits[kind]++
	return true
}

// withWatch lets the manager's client be intercepted (the interceptor wants
// a WithWatch; the controllers never watch through it).
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not used")
}

func (a *apiFaults) wrap(c client.Client) client.Client {
	return interceptor.NewClient(withWatch{c}, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if kind := reflect.TypeOf(obj).Elem().Name(); a.fail(kind) {
				return apierrors.NewServiceUnavailable("injected: the API server cannot serve " + kind + " right now")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// rig is an emulator of the test's own and winkube's controllers, whose
// management-cluster client fails reads on demand. Failed reconciles back
// off as in production, capped low so that a test with many failures in a
// row does not wait out minutes of backoff.
type rig struct {
	t   *testing.T
	emu *arm.Server
	cfg endpoint.Config
	api *apiFaults
	az  *azure
}

func newRig(t *testing.T, o arm.Options) *rig {
	t.Helper()
	r := &rig{t: t, api: &apiFaults{}}
	r.emu, r.cfg = newEmulator(t, o)
	r.az = newAzure(t, r.cfg)
	mgr, err := ctrl.NewManager(env.Config, managerOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	c := r.api.wrap(mgr.GetClient())
	cl := cloud.New(r.cfg)
	const requeue = 50 * time.Millisecond
	opts := controller.Options{
		MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true), UsePriorityQueue: ptr.To(false),
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 500*time.Millisecond),
	}
	// The rig's clusters act as the manager's own credential (the
	// emulator's static token).
	ids := &controllers.Identities{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Cloud: cl, ManagerCredentialNamespaces: []string{controllers.AllNamespaces}}
	for _, err := range []error{
		(&controllers.AzureClusterReconciler{Client: c, Cloud: cl, Identities: ids, Requeue: requeue}).SetupWithManager(mgr, opts),
		(&controllers.AzureMachineReconciler{Client: c, Cloud: cl, Identities: ids, Requeue: requeue}).SetupWithManager(mgr, opts),
		(&controllers.AzureMachinePoolReconciler{Client: c, Reader: mgr.GetAPIReader(), Cloud: cl, Identities: ids, Requeue: requeue}).SetupWithManager(mgr, opts),
		(&controllers.AzureMachinePoolMachineReconciler{Client: c, Reader: mgr.GetAPIReader(), Cloud: cl, Identities: ids, Requeue: requeue}).SetupWithManager(mgr, opts),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(runManager(t, mgr))
	return r
}

// cluster is newCluster for a rig test.
func (r *rig) cluster(name string, mutate ...func(*infrav1.AzureClusterSpec)) *fixture {
	r.t.Helper()
	return newCluster(r.t, name, mutate...)
}

// armFault fails every request of method on kind with status; the count it
// returns is of those requests.
func (r *rig) armFault(method, kind string, status int) func() int64 {
	return r.armFaults(arm.Fault{Method: method, Kind: kind, Percent: 100, Status: status})
}

func (r *rig) armFaults(faults ...arm.Fault) func() int64 {
	r.emu.SetFaults(arm.FaultConfig{Faults: faults})
	return func() int64 {
		c := r.emu.Counters()
		var n int64
		for _, f := range faults {
			n += c[f.Method+" "+f.Kind]
		}
		return n
	}
}

// pollFaults fail the polls of every operation and the reads of kind: an
// accepted DELETE whose outcome cannot be learnt, by either way.
func (r *rig) pollFaults(kind string) func() int64 {
	return r.armFaults(arm.Fault{Method: "GET", Kind: "operations", Percent: 100, Status: 500}, arm.Fault{Method: "GET", Kind: kind, Percent: 100, Status: 500})
}

func (r *rig) heal() {
	r.api.set()
	r.emu.SetFaults(arm.FaultConfig{})
}

func readyOf(obj client.Object) *metav1.Condition {
	g, ok := obj.(conditions.Getter)
	if !ok {
		return nil
	}
	return conditions.Get(g, "Ready")
}

// expectBlocked waits until obj's deletion is blocked by the fault in place:
// Ready is DeletionBlocked with a message containing want, the failing call
// was made again after that (the controller retries), and the object is
// still there with its finalizer.
func (r *rig) expectBlocked(obj client.Object, finalizer, want string, attempts func() int64) {
	r.t.Helper()
	seen := int64(-1)
	env.Until(r.t, time.Minute, func(read client.Reader) string {
		if err := read.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			if apierrors.IsNotFound(err) {
				r.t.Fatalf("%T %s was deleted while %q should have blocked it", obj, obj.GetName(), want)
			}
			return err.Error()
		}
		if !controllerutil.ContainsFinalizer(obj, finalizer) {
			r.t.Fatalf("%T %s lost its finalizer while %q should have blocked it", obj, obj.GetName(), want)
		}
		c := readyOf(obj)
		if c == nil || c.Reason != "DeletionBlocked" || !strings.Contains(c.Message, want) {
			return fmt.Sprintf("Ready %+v; want DeletionBlocked saying %q", c, want)
		}
		if seen < 0 {
			seen = attempts()
			return "waiting for the controller to try again"
		}
		if attempts() <= seen {
			return fmt.Sprintf("waiting for the controller to try again (%d failed calls so far)", seen)
		}
		return ""
	})
	r.t.Logf("blocked as it should be: %s", strings.SplitN(readyOf(obj).Message, "\n", 2)[0])
}

func waitGone(t *testing.T, objs ...client.Object) {
	t.Helper()
	env.Until(t, time.Minute, func(r client.Reader) string {
		for _, o := range objs {
			if err := r.Get(context.Background(), client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("%T %s still there (%v): %+v", o, o.GetName(), err, readyOf(o))
			}
		}
		return ""
	})
}

// everything lists every resource of the subscription, by group, as
// "type/name", with the groups themselves.
func (a *azure) everything() map[string][]string {
	out := map[string][]string{}
	p := a.groups.NewListPager(nil)
	for p.More() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			a.t.Fatal(err)
		}
		for _, g := range page.Value {
			out[*g.Name] = []string{}
			for typ, names := range a.inventory(*g.Name) {
				for _, n := range names {
					out[*g.Name] = append(out[*g.Name], typ+"/"+n)
				}
			}
			sort.Strings(out[*g.Name])
		}
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func done[T any](t *testing.T, p *azruntime.Poller[T], err error) {
	t.Helper()
	if err == nil {
		_, err = p.PollUntilDone(context.Background(), &azruntime.PollUntilDoneOptions{Frequency: 10 * time.Millisecond})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestMachineDeletionWaitsOutEveryError deletes a control-plane machine
// while every step of its deletion fails in turn (the API server's Cluster
// reads, then Azure's answers for the VM, its delete operation (which
// takes its OS disk), NIC and NAT rule): the finalizer stays and Ready says what blocks until the
// fault heals; then nothing of the machine is left. A second machine whose
// Cluster and AzureCluster are gone still deletes what it made, from its
// own records.
func TestMachineDeletionWaitsOutEveryError(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{OperationDelay: 100 * time.Millisecond})
	f := r.cluster("delm")
	f.waitClusterProvisioned(time.Minute)
	f.newMachine("delm-control-plane-aaaaa", true, false, "1")
	f.newMachine("delm-control-plane-bbbbb", true, false, "2")
	ams := f.waitMachinesProvisioned(time.Minute, "delm-control-plane-aaaaa", "delm-control-plane-bbbbb")
	am, orphan := ams["delm-control-plane-aaaaa"], ams["delm-control-plane-bbbbb"]
	vm := am.Status.VMName
	if n := len(am.Status.CreatedResources); n != 4 {
		t.Fatalf("the machine recorded %d resources, want its VM, OS disk, NIC and NAT rule: %v", n, am.Status.CreatedResources)
	}

	r.api.set("Cluster")
	if err := env.Client.Delete(f.ctx, am); err != nil {
		t.Fatal(err)
	}
	r.expectBlocked(am, infrav1.MachineFinalizer, "reading the Cluster", r.api.count("Cluster"))
	for _, p := range []struct {
		method, kind string
		status       int
		want         string
	}{
		// The VM is read first to see that its OS disk goes with it.
		{"GET", "virtualMachines", 500, "deleting virtualmachines/osdisk " + vm},
		{"DELETE", "virtualMachines", 500, "Injected fault: DELETE virtualMachines failed with 500"},
		{"DELETE", "networkInterfaces", 429, "Azure refused the request for now (HTTP 429 TooManyRequests)"},
		{"DELETE", "loadBalancers/inboundNatRules", 500, "Injected fault: DELETE loadBalancers/inboundNatRules failed with 500"},
	} {
		r.api.set()
		attempts := r.armFault(p.method, p.kind, p.status)
		r.expectBlocked(am, infrav1.MachineFinalizer, p.want, attempts)
		if p.kind == "virtualMachines" && p.method == "DELETE" {
			// The VM's DELETE is accepted, but neither its operation nor
			// the VM can be read: the machine waits until Azure says the
			// VM is gone.
			r.expectBlocked(am, infrav1.MachineFinalizer, "Injected fault: GET", r.pollFaults("virtualMachines"))
		}
	}
	// The AzureCluster is not needed to delete a machine: a fault reading
	// it does not hold the deletion up.
	r.heal()
	r.api.set("AzureCluster")
	waitGone(t, am)
	r.heal()
	r.noneLeftOf(f.ns, vm)
	lb, err := r.az.lbs.Get(f.ctx, f.ns, f.ac.Spec.NetworkSpec.APIServerLB.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range lb.Properties.InboundNatRules {
		if *rule.Name == vm {
			t.Errorf("NAT rule %s outlived its machine", vm)
		}
	}

	// The Cluster and AzureCluster go first (paused, so the AzureCluster
	// controller leaves Azure alone, and its finalizer removed by hand):
	// the orphan machine does not know which identity made its resources,
	// so it deletes nothing, with no credential, and says why.
	ac := f.ac.DeepCopy()
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(ac), ac); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ac.DeepCopy())
	ac.Annotations = map[string]string{clusterv1.PausedAnnotation: "true"}
	ac.Finalizers = nil
	if err := env.Client.Patch(f.ctx, ac, patch); err != nil {
		t.Fatal(err)
	}
	f.deleteAndWait(time.Minute, ac, f.cluster)
	ovm := orphan.Status.VMName
	if err := env.Client.Delete(f.ctx, orphan); err != nil {
		t.Fatal(err)
	}
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKeyFromObject(orphan), orphan); err != nil {
			t.Fatalf("the orphan machine went without its AzureCluster: %v", err)
		}
		if c := readyOf(orphan); c == nil || c.Reason != "DeletionBlocked" || !strings.Contains(c.Message, `the AzureCluster of cluster "delm" in namespace `+f.ns+" is gone") {
			return fmt.Sprintf("Ready %+v; want DeletionBlocked saying the AzureCluster is gone", c)
		}
		return ""
	})
	if _, err := r.az.vms.Get(f.ctx, f.ns, ovm, nil); err != nil {
		t.Fatalf("the orphan machine's VM went without its AzureCluster: %v", err)
	}
	// The AzureCluster back (still paused, its Cluster gone): the machine
	// acts as the cluster's identity again and deletes its VM, disk, NIC
	// and NAT rule.
	back := &infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Name: ac.Name, Namespace: ac.Namespace, Labels: ac.Labels, Annotations: ac.Annotations}, Spec: ac.Spec}
	if err := env.Client.Create(f.ctx, back); err != nil {
		t.Fatal(err)
	}
	waitGone(t, orphan)
	for typ, names := range r.az.inventory(f.ns) {
		for _, n := range names {
			if strings.HasPrefix(n, ovm) {
				t.Errorf("%s %s outlived its machine, whose cluster was gone", typ, n)
			}
		}
	}
	lb, err = r.az.lbs.Get(f.ctx, f.ns, f.ac.Spec.NetworkSpec.APIServerLB.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(lb.Properties.InboundNatRules); n != 0 {
		t.Errorf("%d NAT rules left after both control-plane machines went", n)
	}
	left := r.az.inventory(f.ns)
	for _, typ := range []string{"virtualMachines", "disks", "networkInterfaces"} {
		if len(left[typ]) != 0 {
			t.Errorf("%s leaked: %v", typ, left[typ])
		}
	}
	t.Logf("left in the cluster's group (the cluster's network, its AzureCluster force-removed): %v", left)
}

// TestPoolDeletionWaitsOutEveryError: an AzureMachinePoolMachine waits out
// a failing read of its pool and a failing instance DELETE; the
// AzureMachinePool waits out failing Cluster reads and a failing scale-set
// DELETE. Afterwards no scale set or instance is left.
func TestPoolDeletionWaitsOutEveryError(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	f := r.cluster("delp")
	f.waitClusterProvisioned(time.Minute)
	_, amp := f.newPool("delp-pool-abcde", 2, false)
	f.waitPool(amp, 2)
	machines := f.poolMachines(amp.Name)
	victim := machines[0].DeepCopy()

	r.api.set("AzureMachinePool")
	if err := env.Client.Delete(f.ctx, victim); err != nil {
		t.Fatal(err)
	}
	r.expectBlocked(victim, infrav1.MachinePoolMachineFinalizer, "reading the AzureMachinePool", r.api.count("AzureMachinePool"))
	r.api.set()
	r.expectBlocked(victim, infrav1.MachinePoolMachineFinalizer, "Injected fault: DELETE virtualMachineScaleSets/virtualMachines failed with 500",
		r.armFault("DELETE", "virtualMachineScaleSets/virtualMachines", 500))
	r.heal()
	waitGone(t, victim)
	for _, in := range r.az.instances(f.ns, amp.Name) {
		if in.id == victim.Spec.InstanceID {
			t.Fatalf("instance %s outlived its AzureMachinePoolMachine", in.id)
		}
	}

	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(amp), amp); err != nil {
		t.Fatal(err)
	}
	if len(amp.Status.CreatedResources) != 1 {
		t.Fatalf("the pool recorded %v, want its scale set", amp.Status.CreatedResources)
	}
	r.api.set("Cluster")
	if err := env.Client.Delete(f.ctx, amp); err != nil {
		t.Fatal(err)
	}
	r.expectBlocked(amp, infrav1.MachinePoolFinalizer, "reading the Cluster", r.api.count("Cluster"))
	r.api.set()
	r.expectBlocked(amp, infrav1.MachinePoolFinalizer, "Injected fault: DELETE virtualMachineScaleSets failed with 500",
		r.armFault("DELETE", "virtualMachineScaleSets", 500))
	r.heal()
	waitGone(t, amp)
	poll.Until(t, time.Minute, func() string {
		if n := len(f.poolMachines(amp.Name)); n != 0 {
			return fmt.Sprintf("%d AzureMachinePoolMachines left", n)
		}
		return ""
	})
	inv := r.az.inventory(f.ns)
	if len(inv["virtualMachineScaleSets"]) != 0 || len(inv["virtualMachines"]) != 0 {
		t.Fatalf("the pool's scale set or instances leaked: %v", inv)
	}
}

// TestClusterDeletionWaitsOutEveryError deletes a cluster in a group of its
// own while the Cluster reads, the group's read, its DELETE and the delete
// operation's polls fail in turn: afterwards the subscription is empty.
func TestClusterDeletionWaitsOutEveryError(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{OperationDelay: 100 * time.Millisecond})
	f := r.cluster("delc")
	f.waitClusterProvisioned(time.Minute)
	r.api.set("Cluster")
	if err := env.Client.Delete(f.ctx, f.ac); err != nil {
		t.Fatal(err)
	}
	r.expectBlocked(f.ac, infrav1.ClusterFinalizer, "reading the owning Cluster", r.api.count("Cluster"))
	r.api.set()
	for _, p := range []struct {
		method string
		status int
	}{{"GET", 500}, {"DELETE", 500}} {
		r.expectBlocked(f.ac, infrav1.ClusterFinalizer, fmt.Sprintf("Injected fault: %s resourceGroups failed with %d", p.method, p.status),
			r.armFault(p.method, "resourceGroups", p.status))
	}
	// The group's DELETE is accepted, but neither its operation nor the
	// group can be read: the AzureCluster waits until Azure says the group
	// is gone.
	r.expectBlocked(f.ac, infrav1.ClusterFinalizer, "Injected fault: GET", r.pollFaults("resourceGroups"))
	r.heal()
	waitGone(t, f.ac)
	if all := r.az.everything(); len(all) != 0 {
		t.Fatalf("left in the subscription after the cluster went: %v", all)
	}
}

// userNetwork makes, as a user would, a group with an NSG and a VNet with a
// subnet that uses it, none tagged as any cluster's.
func userNetwork(t *testing.T, r *rig, rg, vnet, subnet, subnetCIDR, nsg string) (*armnetwork.SubnetsClient, *armnetwork.SecurityGroupsClient, *armnetwork.VirtualNetworksClient) {
	t.Helper()
	ctx := context.Background()
	opts, err := r.cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.az.groups.CreateOrUpdate(ctx, rg, armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatal(err)
	}
	nsgs, _ := armnetwork.NewSecurityGroupsClient(subscription, r.cfg.Credential, opts)
	p, err := nsgs.BeginCreateOrUpdate(ctx, rg, nsg, armnetwork.SecurityGroup{Location: to.Ptr("westeurope"), Tags: map[string]*string{"owner": to.Ptr("the user")}}, nil)
	done(t, p, err)
	nsgObj, err := nsgs.Get(ctx, rg, nsg, nil)
	if err != nil {
		t.Fatal(err)
	}
	vnets, _ := armnetwork.NewVirtualNetworksClient(subscription, r.cfg.Credential, opts)
	vp, err := vnets.BeginCreateOrUpdate(ctx, rg, vnet, armnetwork.VirtualNetwork{
		Location: to.Ptr("westeurope"),
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/12")}},
			Subnets: []*armnetwork.Subnet{{Name: to.Ptr(subnet), Properties: &armnetwork.SubnetPropertiesFormat{
				AddressPrefix: to.Ptr(subnetCIDR), NetworkSecurityGroup: &armnetwork.SecurityGroup{ID: nsgObj.ID},
			}}},
		},
	}, nil)
	done(t, vp, err)
	subnets, _ := armnetwork.NewSubnetsClient(subscription, r.cfg.Credential, opts)
	return subnets, nsgs, vnets
}

// TestUserNetworkSurvivesFaultyDeletion: a cluster in the user's group and
// VNet, beside the user's own subnet and NSG, is deleted while each of its
// delete steps fails in turn (its subnets, load balancer, public IPs, NAT
// gateway, route table, NSGs). Afterwards exactly the user's resources are
// left, byte for byte as they were.
func TestUserNetworkSurvivesFaultyDeletion(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	ctx := context.Background()
	const rg = "user-rg"
	subnets, nsgs, vnets := userNetwork(t, r, rg, "user-vnet", "user-subnet", "10.4.0.0/24", "user-nsg")
	snapshot := func() (string, string) {
		sn, err := subnets.Get(ctx, rg, "user-vnet", "user-subnet", nil)
		if err != nil {
			t.Fatal(err)
		}
		nsg, err := nsgs.Get(ctx, rg, "user-nsg", nil)
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, sn.Subnet), mustJSON(t, nsg.SecurityGroup)
	}
	subnetBefore, nsgBefore := snapshot()
	everythingBefore := r.az.everything()

	f := r.cluster("delu", func(s *infrav1.AzureClusterSpec) {
		s.ResourceGroup = rg
		s.NetworkSpec.Vnet = infrav1.VnetSpec{Name: "user-vnet", CIDRBlocks: []string{"10.0.0.0/12"}}
		s.NetworkSpec.Subnets = []infrav1.SubnetSpec{
			{Name: "delu-cp", Role: infrav1.SubnetControlPlane, CIDRBlocks: []string{"10.0.0.0/16"}},
			{Name: "delu-nodes", Role: infrav1.SubnetNode, CIDRBlocks: []string{"10.1.0.0/16"}},
		}
	})
	f.waitClusterProvisioned(time.Minute)
	if n := len(f.ac.Status.CreatedResources); n != 2 {
		t.Fatalf("the AzureCluster recorded %v, want the two subnets it added to the user's VNet", f.ac.Status.CreatedResources)
	}
	v, err := vnets.Get(ctx, rg, "user-vnet", nil)
	if err != nil || len(v.Properties.Subnets) != 3 {
		t.Fatalf("the user's VNet should hold the user's subnet and the cluster's two: %v", err)
	}
	// Each fault is in place before the controller can reach its kind: the
	// first before the deletion starts (set after it, a quick controller
	// could delete every subnet first and the whole cluster with them),
	// the next while the controller is held by the one before.
	kinds := []string{"virtualNetworks/subnets", "loadBalancers", "publicIPAddresses", "natGateways", "routeTables", "networkSecurityGroups"}
	attempts := r.armFault("DELETE", kinds[0], 500)
	if err := env.Client.Delete(f.ctx, f.ac); err != nil {
		t.Fatal(err)
	}
	for i, kind := range kinds {
		if i > 0 {
			attempts = r.armFault("DELETE", kind, 500)
		}
		r.expectBlocked(f.ac, infrav1.ClusterFinalizer, "Injected fault: DELETE "+kind+" failed with 500", attempts)
	}
	r.heal()
	waitGone(t, f.ac)

	subnetAfter, nsgAfter := snapshot()
	if subnetAfter != subnetBefore {
		t.Errorf("the user's subnet changed:\nbefore %s\nafter  %s", subnetBefore, subnetAfter)
	}
	if nsgAfter != nsgBefore {
		t.Errorf("the user's NSG changed:\nbefore %s\nafter  %s", nsgBefore, nsgAfter)
	}
	if after := r.az.everything(); !reflect.DeepEqual(after, everythingBefore) {
		t.Errorf("the subscription holds %v after the cluster went, want what the user had: %v", after, everythingBefore)
	}
	v, _ = vnets.Get(ctx, rg, "user-vnet", nil)
	if len(v.Properties.Subnets) != 1 || *v.Properties.Subnets[0].Name != "user-subnet" {
		t.Errorf("the user's VNet should hold only the user's subnet again: %s", mustJSON(t, v.Properties.Subnets))
	}
}

// TestUsersSameNamedResourcesAreRefused: a cluster whose node subnet is
// named like a subnet the user already has in the VNet, and one whose NSG is
// named like the user's NSG, are refused with ResourceNotOwned; the user's
// subnet and NSG stay byte for byte as they were, through the clusters'
// deletion too.
func TestUsersSameNamedResourcesAreRefused(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	ctx := context.Background()
	const rg = "refuse-rg"
	subnets, nsgs, vnets := userNetwork(t, r, rg, "refuse-vnet", "taken", "10.1.0.0/16", "theirs")
	snapshot := func() (string, string) {
		sn, err := subnets.Get(ctx, rg, "refuse-vnet", "taken", nil)
		if err != nil {
			t.Fatal(err)
		}
		nsg, err := nsgs.Get(ctx, rg, "theirs", nil)
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, sn.Subnet), mustJSON(t, nsg.SecurityGroup)
	}
	subnetBefore, nsgBefore := snapshot()
	everythingBefore := r.az.everything()

	waitRefused := func(f *fixture, want string) {
		t.Helper()
		env.Until(t, time.Minute, func(r client.Reader) string {
			if err := r.Get(f.ctx, client.ObjectKeyFromObject(f.ac), f.ac); err != nil {
				return err.Error()
			}
			if c := readyOf(f.ac); c == nil || c.Reason != "ResourceNotOwned" || !strings.Contains(c.Message, want) {
				return fmt.Sprintf("Ready %+v; want ResourceNotOwned saying %q", c, want)
			}
			return ""
		})
		t.Logf("refused: %s", readyOf(f.ac).Message)
		if ptr.Deref(f.ac.Status.Initialization.Provisioned, false) {
			t.Fatal("a refused cluster was reported provisioned")
		}
	}
	network := func(cp, cpCIDR, nodes, nodeNSG string) func(*infrav1.AzureClusterSpec) {
		return func(s *infrav1.AzureClusterSpec) {
			s.ResourceGroup = rg
			s.NetworkSpec.Vnet = infrav1.VnetSpec{Name: "refuse-vnet", CIDRBlocks: []string{"10.0.0.0/12"}}
			s.NetworkSpec.Subnets = []infrav1.SubnetSpec{
				{Name: cp, Role: infrav1.SubnetControlPlane, CIDRBlocks: []string{cpCIDR}},
				{Name: "taken", Role: infrav1.SubnetNode, CIDRBlocks: []string{"10.1.0.0/16"}, SecurityGroup: infrav1.SecurityGroup{Name: nodeNSG}},
			}
			if nodes != "" {
				s.NetworkSpec.Subnets[1].Name = nodes
				s.NetworkSpec.Subnets[1].CIDRBlocks = []string{"10.2.0.0/16"}
			}
		}
	}

	clash := r.cluster("refs", network("refs-cp", "10.0.0.0/16", "", "refs-nodes-nsg"))
	waitRefused(clash, "subnet taken already exists in VNet refuse-vnet")
	f := r.cluster("refn", network("refn-cp", "10.3.0.0/16", "refn-nodes", "theirs"))
	waitRefused(f, "network security group theirs already exists and is not winkube's")
	if s, n := snapshot(); s != subnetBefore || n != nsgBefore {
		t.Fatalf("the user's subnet or NSG changed while refused:\nsubnet %s\n  was  %s\nNSG %s\n  was %s", s, subnetBefore, n, nsgBefore)
	}

	f.deleteAndWait(time.Minute, clash.ac, f.ac)
	if s, n := snapshot(); s != subnetBefore || n != nsgBefore {
		t.Fatalf("the user's subnet or NSG changed by the clusters' deletion:\nsubnet %s\n  was  %s\nNSG %s\n  was %s", s, subnetBefore, n, nsgBefore)
	}
	if after := r.az.everything(); !reflect.DeepEqual(after, everythingBefore) {
		t.Errorf("the subscription holds %v after the clusters went, want what the user had: %v", after, everythingBefore)
	}
	v, err := vnets.Get(ctx, rg, "refuse-vnet", nil)
	if err != nil || len(v.Properties.Subnets) != 1 {
		t.Errorf("the user's VNet should hold only the user's subnet: %v %s", err, mustJSON(t, v.Properties.Subnets))
	}
	if _, err := r.az.groups.Get(ctx, rg, nil); async.IsNotFound(err) {
		t.Error("the user's resource group was deleted")
	}
}

// TestMachineRefusesSomeoneElsesNICAndDisk: a NIC, or a disk, that someone
// else made with the name a machine's NIC or OS disk would have is refused
// (ResourceNotOwned), never used, and the machine's deletion leaves it
// exactly as it was.
func TestMachineRefusesSomeoneElsesNICAndDisk(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	f := r.cluster("coll")
	f.waitClusterProvisioned(time.Minute)
	opts, err := r.cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	nics, _ := armnetwork.NewInterfacesClient(subscription, r.cfg.Credential, opts)
	subnetID := "/subscriptions/" + subscription + "/resourceGroups/" + f.ns + "/providers/Microsoft.Network/virtualNetworks/coll-vnet/subnets/coll-node-subnet"
	p, err := nics.BeginCreateOrUpdate(f.ctx, f.ns, "coll-md-linux-abcde-nic", armnetwork.Interface{
		Location: to.Ptr("westeurope"), Tags: map[string]*string{"owner": to.Ptr("someone else")},
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name: to.Ptr("ipconfig1"), Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnetID)}},
		}}},
	}, nil)
	done(t, p, err)
	snapshot := func() string {
		n, err := nics.Get(f.ctx, f.ns, "coll-md-linux-abcde-nic", nil)
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, n.Interface)
	}
	before := snapshot()

	am := f.newMachine("coll-md-linux-abcde", false, false, "1")
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKeyFromObject(am), am); err != nil {
			return err.Error()
		}
		if c := readyOf(am); c == nil || c.Reason != "ResourceNotOwned" || !strings.Contains(c.Message, "coll-md-linux-abcde-nic") {
			return fmt.Sprintf("Ready %+v, want ResourceNotOwned naming the NIC", c)
		}
		return ""
	})
	if len(am.Status.CreatedResources) != 0 {
		t.Fatalf("the refused machine recorded %v as its own", am.Status.CreatedResources)
	}
	f.deleteAndWait(time.Minute, am)
	if after := snapshot(); after != before {
		t.Fatalf("someone else's NIC changed:\nbefore %s\nafter  %s", before, after)
	}
	if inv := r.az.inventory(f.ns); len(inv["virtualMachines"]) != 0 {
		t.Fatalf("a refused machine made a VM: %v", inv["virtualMachines"])
	}

	// The same for a disk named like a machine's OS disk: OS disks carry no
	// tags, so only one attached to the machine's own VM is the machine's.
	// Made through the generic resources API: the emulator answers a disk's
	// PUT with 201, which the Disks client (200 or 202, as the REST spec
	// says) takes for an error.
	disks, _ := armcompute.NewDisksClient(subscription, r.cfg.Credential, opts)
	dp, err := r.az.res.BeginCreateOrUpdateByID(f.ctx, "/subscriptions/"+subscription+"/resourceGroups/"+f.ns+"/providers/Microsoft.Compute/disks/coll-md-disk-fghij_OSDisk", "2023-04-02",
		armresources.GenericResource{Location: to.Ptr("westeurope"), Properties: map[string]any{"creationData": map[string]any{"createOption": "Empty"}, "diskSizeGB": 32}}, nil)
	done(t, dp, err)
	diskJSON := func() string {
		d, err := disks.Get(f.ctx, f.ns, "coll-md-disk-fghij_OSDisk", nil)
		if err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, d.Disk)
	}
	diskBefore := diskJSON()
	am = f.newMachine("coll-md-disk-fghij", false, false, "1")
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKeyFromObject(am), am); err != nil {
			return err.Error()
		}
		if c := readyOf(am); c == nil || c.Reason != "ResourceNotOwned" || !strings.Contains(c.Message, "coll-md-disk-fghij_OSDisk") {
			return fmt.Sprintf("Ready %+v, want ResourceNotOwned naming the disk", c)
		}
		return ""
	})
	for _, id := range am.Status.CreatedResources {
		if strings.Contains(id, "/disks/") {
			t.Fatalf("the refused machine recorded someone else's disk as its own: %v", am.Status.CreatedResources)
		}
	}
	f.deleteAndWait(time.Minute, am)
	if after := diskJSON(); after != diskBefore {
		t.Fatalf("someone else's disk changed:\nbefore %s\nafter  %s", diskBefore, after)
	}
	if inv := r.az.inventory(f.ns); len(inv["virtualMachines"]) != 0 || len(inv["networkInterfaces"]) != 1 {
		t.Fatalf("a refused machine left a VM or NIC of its own: %v", inv)
	}
}

// TestOwnedVNetInUsersGroup: a cluster in the user's (empty) resource group
// makes its own VNet there; its deletion waits out a failing VNet DELETE
// and then leaves the user's group as it was: empty, and still there.
func TestOwnedVNetInUsersGroup(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	const rg = "users-empty-rg"
	if _, err := r.az.groups.CreateOrUpdate(context.Background(), rg, armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatal(err)
	}
	before := r.az.everything()
	f := r.cluster("ownv", func(s *infrav1.AzureClusterSpec) { s.ResourceGroup = rg })
	f.waitClusterProvisioned(time.Minute)
	if len(f.ac.Status.CreatedResources) != 0 {
		t.Fatalf("subnets of winkube's own VNet go with it and need no record: %v", f.ac.Status.CreatedResources)
	}
	// The fault is in place before the deletion starts.
	attempts := r.armFault("DELETE", "virtualNetworks", 500)
	if err := env.Client.Delete(f.ctx, f.ac); err != nil {
		t.Fatal(err)
	}
	r.expectBlocked(f.ac, infrav1.ClusterFinalizer, "Injected fault: DELETE virtualNetworks failed with 500", attempts)
	r.heal()
	waitGone(t, f.ac)
	if after := r.az.everything(); !reflect.DeepEqual(after, before) {
		t.Fatalf("the subscription holds %v after the cluster went, want the user's empty group: %v", after, before)
	}
}

// noneLeftOf fails the test for each resource of the group whose name
// starts with the VM's (its disk, NIC, NAT rule): it outlived its machine.
func (r *rig) noneLeftOf(rg, vm string) {
	r.t.Helper()
	for typ, names := range r.az.inventory(rg) {
		for _, n := range names {
			if strings.HasPrefix(n, vm) {
				r.t.Errorf("%s %s outlived its machine", typ, n)
			}
		}
	}
}

// TestMachineOSDiskGoesWithItsVM: a machine's VM deletes its OS disk with
// it, and one made before winkube set that (Azure's default keeps the
// disk) is switched over before it is deleted: no disk stays behind, and
// none is ever deleted on its name alone.
func TestMachineOSDiskGoesWithItsVM(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	f := r.cluster("disk")
	f.waitClusterProvisioned(time.Minute)
	for _, name := range []string{"disk-md-new-abcde", "disk-md-old-abcde"} {
		am := f.newMachine(name, false, false, "1")
		f.waitMachinesProvisioned(2*time.Minute, name)
		vm, err := r.az.vms.Get(f.ctx, f.ns, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !virtualmachines.DeletesOSDisk(&vm.VirtualMachine) {
			t.Fatalf("VM %s keeps its OS disk when it is deleted", name)
		}
		if strings.Contains(name, "old") {
			p, err := r.az.vms.BeginUpdate(f.ctx, f.ns, name, armcompute.VirtualMachineUpdate{Properties: &armcompute.VirtualMachineProperties{
				StorageProfile: &armcompute.StorageProfile{OSDisk: &armcompute.OSDisk{DeleteOption: to.Ptr(armcompute.DiskDeleteOptionTypesDetach)}}}}, nil)
			done(t, p, err)
		}
		f.deleteAndWait(2*time.Minute, am)
		if inv := r.az.inventory(f.ns); len(inv["disks"]) != 0 || len(inv["virtualMachines"]) != 0 {
			t.Fatalf("after machine %s was deleted: %v", name, inv)
		}
	}
}
