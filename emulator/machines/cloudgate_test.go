package machines_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/internal/poll"
)

// TestCloudActsOnlyWhileACCMRuns: LoadBalancer Services get an address
// only while a cloud-controller-manager pod runs Ready in kube-system, as
// on Azure, where nothing else programs the load balancer.
func TestCloudActsOnlyWhileACCMRuns(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "gate-rg")
	cs := kubernetes.NewForConfigOrDie(env.Config)
	catalog := &startneeds.Checker{Components: startneeds.Catalog()}
	c := cloudprovider.Start(cloudprovider.Config{
		Client: cs, Log: logr.Discard(),
		Images:  func(image string) bool { return catalog.HasEffect("linux", image, startneeds.EffectCloudController) },
		Connect: machines.ARMNetwork(connectARM(&armCfg)), ReadNodeFile: a.cloudConfig(t, "cp", nil), PrivateIP: privateIP,
	})
	t.Cleanup(c.Stop)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gate"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services("gate").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Active() {
		t.Fatal("the cloud acts with no cloud-controller-manager in the cluster")
	}
	pod, err := cs.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud-controller-manager-x1"},
		Spec: corev1.PodSpec{NodeName: "cp", Containers: []corev1.Container{{Name: "cloud-controller-manager",
			Image: "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager:v1.36.0"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Running but not Ready (its process failed its checks): still nothing.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if pod, err = cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() string {
		if p, _ := cs.CoreV1().Pods("kube-system").Get(ctx, pod.Name, metav1.GetOptions{}); p == nil || p.Status.Phase != corev1.PodRunning {
			return "pod status not written"
		}
		return ""
	})
	if c.Active() {
		t.Fatal("the cloud acts while the cloud-controller-manager is not Ready")
	}
	if s, _ := cs.CoreV1().Services("gate").Get(ctx, svc.Name, metav1.GetOptions{}); s != nil && len(s.Status.LoadBalancer.Ingress) > 0 {
		t.Fatalf("Service got %v with no cloud-controller-manager Ready", s.Status.LoadBalancer.Ingress)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err = cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		s, err := cs.CoreV1().Services("gate").Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return "Service still <pending>"
		}
		return ""
	})
	// Gone while the controller runs: its finalizer comes off and its
	// load balancer goes, leaving nothing for the next test.
	if err := cs.CoreV1().Services("gate").Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := cs.CoreV1().Services("gate").Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
			return "Service still there"
		}
		return ""
	})
	if err := cs.CoreV1().Pods("kube-system").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() string {
		if c.Active() {
			return "the cloud still acts after its controller manager is gone"
		}
		return ""
	})
}

// TestNodeManagerInitializesItsNode: what the cloud-node-manager sets from
// the instance metadata, the labels a kubelet with an external cloud
// provider leaves to it, and the taint lifted.
func TestNodeManagerInitializesItsNode(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "init-me", Labels: map[string]string{"kubernetes.io/os": "windows"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: cloudprovider.UninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}, {Key: "os", Value: "windows", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	id := "azure:///subscriptions/" + subscriptID + "/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/win/virtualMachines/3"
	in := cloudprovider.Instance{ProviderID: id, InstanceType: "Standard_D4s_v3", Region: "westeurope", Zone: "westeurope-2",
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.0.7"}}}
	for i := 0; i < 2; i++ { // idempotent
		if err := cloudprovider.InitializeNode(ctx, cs, "init-me", in); err != nil {
			t.Fatal(err)
		}
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "init-me", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.ProviderID != id || n.Labels[cloudprovider.InstanceTypeLabel] != "Standard_D4s_v3" || n.Labels[cloudprovider.RegionLabel] != "westeurope" || n.Labels[cloudprovider.ZoneLabel] != "westeurope-2" {
		t.Errorf("node not initialized: providerID %q labels %v", n.Spec.ProviderID, n.Labels)
	}
	kept := false
	for _, tt := range n.Spec.Taints {
		if tt.Key == cloudprovider.UninitializedTaint {
			t.Errorf("taints %v: the uninitialized taint is still there", n.Spec.Taints)
		}
		kept = kept || tt.Key == "os"
	}
	if !kept {
		t.Errorf("taints %v: the node's own taint was removed too", n.Spec.Taints)
	}
	if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != "10.1.0.7" {
		t.Errorf("addresses %v", n.Status.Addresses)
	}
	// The instance metadata of another VM cannot take the node over.
	if err := cloudprovider.InitializeNode(ctx, cs, "init-me", cloudprovider.Instance{ProviderID: "azure:///subscriptions/x/other"}); err == nil {
		t.Error("a node's provider ID was changed")
	}
	// A node manager stopped mid-way has not initialized anything.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := cloudprovider.InitializeNode(stopped, cs, "init-me", in); err == nil {
		t.Error("InitializeNode with a cancelled context reported success")
	}
}

// TestCloudWaitsForTheCCMsOwnSync: a cloud-controller-manager pod running
// Ready whose own informers have not synced (its ServiceAccount may not
// list what they list) does not make the cloud act; once they sync, after
// a Resync, it does.
func TestCloudWaitsForTheCCMsOwnSync(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	catalog := &startneeds.Checker{Components: startneeds.Catalog()}
	var synced atomic.Bool
	c := cloudprovider.Start(cloudprovider.Config{
		Client: cs, Log: logr.Discard(),
		Images: func(image string) bool { return catalog.HasEffect("linux", image, startneeds.EffectCloudController) },
		Synced: func(*corev1.Pod) bool { return synced.Load() },
	})
	t.Cleanup(c.Stop)
	pod, err := cs.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud-controller-manager-sync"},
		Spec: corev1.PodSpec{NodeName: "cp", Containers: []corev1.Container{{Name: "cloud-controller-manager",
			Image: "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager:v1.36.0"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("kube-system").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err = cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller has seen the pod Running and Ready (its informer),
	// yet does not act.
	poll.Until(t, 10*time.Second, func() string {
		synced.Store(true)
		defer synced.Store(false)
		if !c.Active() {
			return "the controller has not seen the Ready pod yet"
		}
		return ""
	})
	if c.Active() {
		t.Fatal("the cloud acts while the cloud-controller-manager's own informers have not synced")
	}
	synced.Store(true)
	c.Resync()
	if !c.Active() {
		t.Fatal("the cloud does not act once the cloud-controller-manager has synced")
	}
}
