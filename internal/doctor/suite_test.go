package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

// One real API server for the package. Each test builds the cluster it
// needs, checks it healthy, breaks it, checks again, and deletes what it
// made, so the next test starts from an empty cluster.
var env *testenv.Env

func TestMain(m *testing.M) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(testenv.Main(m, testenv.Options{Scheme: scheme.New(),
		CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd"), filepath.Join(root, "config", "capi", "core-v1beta2")},
		CRDs:              []*apiextensionsv1.CustomResourceDefinition{calicoCRD("IPPool", "ippools"), calicoCRD("FelixConfiguration", "felixconfigurations")},
	}, func(e *testenv.Env) { env = e }))
}

// calicoCRD defines one of Calico's cluster-scoped kinds, schema-less: the
// checks read upstream's field names from whatever the objects hold.
func calicoCRD(kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	return testenv.SchemalessCRD("crd.projectcalico.org", kind, plural, apiextensionsv1.ClusterScoped)
}

// cluster is what one test created.
type cluster struct {
	t    *testing.T
	objs []client.Object
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t}
	t.Cleanup(c.deleteAll)
	return c
}

// create makes obj, then writes its status when status is given.
func (c *cluster) create(obj client.Object, status func()) {
	c.t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		c.t.Fatal(err)
	}
	c.objs = append(c.objs, obj)
	if status != nil {
		status()
		if err := env.Client.Status().Update(ctx, obj); err != nil {
			c.t.Fatal(err)
		}
	}
}

// update applies change to obj and writes it (and its status).
func (c *cluster) update(obj client.Object, change func()) {
	c.t.Helper()
	ctx := context.Background()
	change()
	if err := env.Client.Update(ctx, obj); err != nil {
		c.t.Fatal(err)
	}
	change()
	if err := env.Client.Status().Update(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
}

func (c *cluster) delete(obj client.Object) {
	c.t.Helper()
	if err := env.Client.Delete(context.Background(), obj, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
}

func (c *cluster) deleteAll() {
	for i := len(c.objs) - 1; i >= 0; i-- {
		c.delete(c.objs[i])
	}
}

// state reads the cluster as the doctor does.
func (c *cluster) state() *State {
	c.t.Helper()
	s, err := Load(context.Background(), env.Client, env.Config)
	if err != nil {
		c.t.Fatal(err)
	}
	s.Azure = true
	return s
}

func (c *cluster) node(name, os, build, kernel string, change func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: os, corev1.LabelHostname: name}}}
	if build != "" {
		n.Labels[windowsBuildLabel] = build
	}
	if change != nil {
		change(n)
	}
	status, taints := n.Status, n.Spec.Taints
	defer func() {
		// The API server taints a new node not-ready; the node lifecycle
		// controller (not running here) lifts it once the node is Ready.
		n.Spec.Taints = taints
		if err := env.Client.Update(context.Background(), n); err != nil {
			c.t.Fatal(err)
		}
	}()
	c.create(n, func() {
		n.Status = status
		n.Status.NodeInfo.OperatingSystem = os
		n.Status.NodeInfo.KernelVersion = kernel
		if n.Status.NodeInfo.KubeletVersion == "" {
			n.Status.NodeInfo.KubeletVersion = "v1.36.3"
		}
		if n.Status.NodeInfo.ContainerRuntimeVersion == "" {
			n.Status.NodeInfo.ContainerRuntimeVersion = "containerd://1.7.20"
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	})
	return n
}

func (c *cluster) windowsNode(name string) *corev1.Node {
	return c.node(name, "windows", "10.0.20348", "10.0.20348.2655", nil)
}

func (c *cluster) linuxNode(name string) *corev1.Node {
	return c.node(name, "linux", "", "6.8.0-1015-azure", nil)
}

// pod makes a pod bound to node, ready when ready is true.
func (c *cluster) pod(ns, name, node string, labels map[string]string, spec corev1.PodSpec, ready bool) *corev1.Pod {
	if len(spec.Containers) == 0 {
		spec.Containers = []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}
	}
	spec.NodeName = node
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: spec}
	c.create(p, func() { setReady(p, ready, nil) })
	return p
}

func setReady(p *corev1.Pod, ready bool, waiting *corev1.ContainerStateWaiting) {
	st := corev1.ConditionFalse
	p.Status.Phase = corev1.PodPending
	if ready {
		st, p.Status.Phase = corev1.ConditionTrue, corev1.PodRunning
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	p.Status.ContainerStatuses = nil
	for _, ct := range p.Spec.Containers {
		cs := corev1.ContainerStatus{Name: ct.Name, Image: ct.Image, Ready: ready}
		if ready {
			cs.State.Running = &corev1.ContainerStateRunning{}
		} else {
			cs.State.Waiting = waiting
			if waiting == nil {
				cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			}
		}
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
	}
}

// namespace makes a namespace for the test; namespaces are never deleted
// (envtest runs no namespace controller), so each test uses its own names.
func namespace(t *testing.T, name string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

func deployment(ns, name string, spec corev1.PodSpec) *appsv1.Deployment {
	if len(spec.Containers) == 0 {
		spec.Containers = []corev1.Container{{Name: "main", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022"}}
	}
	l := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: spec}}}
}

func daemonSet(ns, name string, spec corev1.PodSpec) *appsv1.DaemonSet {
	if len(spec.Containers) == 0 {
		spec.Containers = []corev1.Container{{Name: "main", Image: "docker.io/library/busybox:1.36"}}
	}
	l := map[string]string{"app": name}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: spec}}}
}

// only keeps the findings of one check.
func only(fs []Finding, check string) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// expect asserts n findings of severity sev, each containing every want.
func expect(t *testing.T, what string, fs []Finding, n int, sev Severity, want ...string) {
	t.Helper()
	if len(fs) != n {
		t.Fatalf("%s: %d findings, want %d: %+v", what, len(fs), n, fs)
	}
	for _, f := range fs {
		if f.Severity != sev {
			t.Errorf("%s: severity %s, want %s: %+v", what, f.Severity, sev, f)
		}
		text := f.Message + " " + f.Fix + " " + f.Object
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: finding %q lacks %q", what, text, w)
			}
		}
	}
}

func parse(v string) (images.Version, error) { return images.ParseVersion(v) }

func azureMachine(c *cluster, ns, name, reason, vmState string) *infrav1.AzureMachine {
	am := &infrav1.AzureMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
		Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}}}
	c.create(am, func() {
		am.Status.VMState = vmState
		am.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: metav1.Now()}}
	})
	return am
}
