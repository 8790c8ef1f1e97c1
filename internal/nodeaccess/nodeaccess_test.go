package nodeaccess

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(testenv.Main(m, testenv.Options{Scheme: scheme.New(), CRDDirectoryPaths: []string{
		filepath.Join(root, "config", "crd"), filepath.Join(root, "config", "capi", "core-v1beta2"),
	}}, func(e *testenv.Env) { env = e }))
}

func create(t *testing.T, obj client.Object, status func()) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if status != nil {
		status()
		if err := env.Client.Status().Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

func cluster(t *testing.T, ns, name, host string) {
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: host, Port: 6443}}}
	create(t, c, nil)
}

func azureMachine(t *testing.T, ns, name, cluster string, os infrav1.OSType, hostname, ip string, nat int32, cp bool) {
	am := &infrav1.AzureMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3", OSDisk: infrav1.OSDisk{OSType: os}}}}
	if cp {
		am.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	create(t, am, func() {
		am.Status.VMName, am.Status.SSHNATPort = hostname, nat
		am.Status.Initialization.Provisioned = ptr.To(true)
		am.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: hostname}, {Type: clusterv1.MachineInternalIP, Address: ip}}
	})
}

func machine(t *testing.T, ns, name, cluster, infra, node string) {
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.MachineSpec{ClusterName: cluster, Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("data")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachine", Name: infra}}}
	create(t, m, func() { m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node} })
}

func TestResolveByEveryName(t *testing.T) {
	ctx := context.Background()
	ns := "resolve"
	create(t, corev1Namespace{}.of(ns), nil)
	cluster(t, ns, "c1", "20.1.2.3")
	azureMachine(t, ns, "c1-control-plane-abcde", "c1", infrav1.Linux, "c1-control-plane-abcde", "10.0.0.4", 22, true)
	azureMachine(t, ns, "c1-control-plane-fghij", "c1", infrav1.Linux, "c1-control-plane-fghij", "10.0.0.5", 2201, true)
	azureMachine(t, ns, "c1-md-win-7d8f9-xk2p4", "c1", infrav1.Windows, "c1-md-win-xk2p4", "10.1.0.4", 0, false)
	machine(t, ns, "c1-md-win-7d8f9-abcd1", "c1", "c1-md-win-7d8f9-xk2p4", "c1-md-win-xk2p4")

	for _, name := range []string{"c1-md-win-7d8f9-abcd1", "c1-md-win-7d8f9-xk2p4", "C1-MD-WIN-XK2P4", "10.1.0.4"} {
		tg, err := Resolve(ctx, env.Client, ns, name, "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tg.Object != "AzureMachine/c1-md-win-7d8f9-xk2p4" || !tg.Windows() || tg.Address != "10.1.0.4" || tg.Hostname != "c1-md-win-xk2p4" || tg.Direct ||
			strings.Join(tg.JumpHosts, ",") != "20.1.2.3:22,20.1.2.3:2201" {
			t.Errorf("%s: %+v", name, tg)
		}
	}
	// A control-plane machine is reached through its own NAT rule first.
	tg, err := Resolve(ctx, env.Client, ns, "c1-control-plane-fghij", "")
	if err != nil || !tg.Direct || !tg.ControlPlane || tg.JumpHosts[0] != "20.1.2.3:2201" {
		t.Fatalf("control plane: %+v, %v", tg, err)
	}

	// A name two clusters share must be narrowed, and unknown names say
	// where winkube looked.
	cluster(t, ns, "c2", "20.9.9.9")
	azureMachine(t, ns, "c2-control-plane-zzzzz", "c2", infrav1.Linux, "c2-control-plane-zzzzz", "10.0.0.4", 22, true)
	if _, err := Resolve(ctx, env.Client, ns, "10.0.0.4", ""); err == nil || !strings.Contains(err.Error(), "--cluster") {
		t.Errorf("an address of two clusters: %v", err)
	}
	if tg, err := Resolve(ctx, env.Client, ns, "10.0.0.4", "c2"); err != nil || tg.JumpHosts[0] != "20.9.9.9:22" {
		t.Errorf("narrowed to c2: %+v, %v", tg, err)
	}
	if _, err := Resolve(ctx, env.Client, ns, "nope", ""); err == nil || !strings.Contains(err.Error(), "namespace "+ns) {
		t.Errorf("an unknown name: %v", err)
	}
	if _, err := Resolve(ctx, env.Client, "elsewhere", "c1-md-win-xk2p4", ""); err == nil {
		t.Error("a name in another namespace must not be found")
	}
}

func TestResolvePoolMachinesAndMissingJumpHost(t *testing.T) {
	ctx := context.Background()
	ns := "pools"
	create(t, corev1Namespace{}.of(ns), nil)
	cluster(t, ns, "p1", "20.4.4.4")
	pool := &infrav1.AzureMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p1-mp-win"},
		Spec: infrav1.AzureMachinePoolSpec{Template: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}}}
	create(t, pool, nil)
	m := &infrav1.AzureMachinePoolMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p1-mp-win-3",
		Labels: map[string]string{clusterv1.ClusterNameLabel: "p1", infrav1.MachinePoolNameLabel: "p1-mp-win"}}}
	create(t, m, func() {
		m.Status.ComputerName = "win-p-win000003"
		m.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.1.0.9"}}
	})
	if _, err := Resolve(ctx, env.Client, ns, "win-p-win000003", ""); err == nil || !strings.Contains(err.Error(), "no control-plane machine with an SSH NAT rule") {
		t.Fatalf("a cluster without jump host: %v", err)
	}
	azureMachine(t, ns, "p1-control-plane-aaaaa", "p1", infrav1.Linux, "p1-control-plane-aaaaa", "10.0.0.4", 22, true)
	tg, err := Resolve(ctx, env.Client, ns, "win-p-win000003", "")
	if err != nil || !tg.Windows() || tg.Object != "AzureMachinePoolMachine/p1-mp-win-3" || tg.Address != "10.1.0.9" || tg.JumpHosts[0] != "20.4.4.4:22" {
		t.Fatalf("pool machine: %+v, %v", tg, err)
	}
}

type corev1Namespace struct{}

func (corev1Namespace) of(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// TestResolveRefusesWhatIsNotAnAddress: a machine's address and the
// cluster's endpoint are dialled and name the host in the user's
// known-hosts file, and whoever may write the objects chose them: a value
// that is not an address (a known-hosts pattern list, a line break) is
// refused, not connected to.
func TestResolveRefusesWhatIsNotAnAddress(t *testing.T) {
	ctx := context.Background()
	ns := "forged"
	create(t, corev1Namespace{}.of(ns), nil)
	cluster(t, ns, "f1", "20.5.5.5")
	azureMachine(t, ns, "f1-control-plane-aaaaa", "f1", infrav1.Linux, "f1-control-plane-aaaaa", "10.0.0.4", 22, true)
	azureMachine(t, ns, "f1-md-0-bbbbb", "f1", infrav1.Linux, "f1-md-0-bbbbb", "10.1.0.4,*,10.1.0.5", 0, false)
	if _, err := Resolve(ctx, env.Client, ns, "f1-md-0-bbbbb", ""); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Errorf("an address with a host pattern list: %v", err)
	}
	if tg, err := Resolve(ctx, env.Client, ns, "f1-control-plane-aaaaa", ""); err != nil || tg.JumpHosts[0] != "20.5.5.5:22" {
		t.Fatalf("the cluster's own machine: %+v, %v", tg, err)
	}
	azureMachine(t, ns, "f1-md-0-ccccc", "f1", infrav1.Linux, "f1-md-0-ccccc", "fe80::1%\n@cert-authority *", 0, false)
	if _, err := Resolve(ctx, env.Client, ns, "f1-md-0-ccccc", ""); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Errorf("an IPv6 address whose zone carries a line: %v", err)
	}
	azureMachine(t, ns, "f1-md-0-ddddd", "f1", infrav1.Linux, "f1-md-0-ddddd\x1b]0;owned\a", "10.1.0.6", 0, false)
	if tg, err := Resolve(ctx, env.Client, ns, "f1-md-0-ddddd", ""); err != nil || tg.Hostname != "f1-md-0-ddddd]0;owned" {
		t.Errorf("a hostname with a terminal escape: %+v, %v", tg, err)
	}
	cluster(t, ns, "f2", "api.example.com\n* ssh-ed25519 AAAA")
	azureMachine(t, ns, "f2-control-plane-aaaaa", "f2", infrav1.Linux, "f2-control-plane-aaaaa", "10.0.0.4", 22, true)
	if _, err := Resolve(ctx, env.Client, ns, "f2-control-plane-aaaaa", ""); err == nil || !strings.Contains(err.Error(), "neither an IP address nor a DNS name") {
		t.Errorf("an endpoint with a line break: %v", err)
	}
	cluster(t, ns, "f3", "API.example.com")
	azureMachine(t, ns, "f3-control-plane-aaaaa", "f3", infrav1.Linux, "f3-control-plane-aaaaa", "10.0.0.4", 22, true)
	if tg, err := Resolve(ctx, env.Client, ns, "f3-control-plane-aaaaa", ""); err != nil || tg.JumpHosts[0] != "API.example.com:22" {
		t.Errorf("a DNS name endpoint: %+v, %v", tg, err)
	}
}
