package nodejoin

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func createPod(t *testing.T, name, node string, owner *metav1.OwnerReference, annotations map[string]string, phase corev1.PodPhase, waiting string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](0), Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	cs := clientset(t)
	p, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = phase
	if waiting != "" {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
	}
	if p, err = cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	return p
}

func createNode(t *testing.T, name string, ready corev1.ConditionStatus, reason string) {
	t.Helper()
	ctx := context.Background()
	cs := clientset(t)
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "windows"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: reason, Message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady"}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// The post-join check names a NotReady node with the kubelet's reason,
// and a CNI pod that does not run with its container's reason.
func TestCheckNamesWhatKeepsTheNodeFromWorking(t *testing.T) {
	ctx := context.Background()
	cs := clientset(t)
	fs, err := Check(ctx, cs, "never-joined")
	if err != nil {
		t.Fatal(err)
	}
	mustFind(t, fs, "node-registered", "no node never-joined")

	createNode(t, "byo-check", corev1.ConditionFalse, "KubeletNotReady")
	ds := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "x", UID: "00000000-0000-0000-0000-000000000001"}
	createPod(t, "kube-proxy-windows-abcde", "byo-check", ds, nil, corev1.PodRunning, "")
	createPod(t, "calico-node-windows-abcde", "byo-check", ds, nil, corev1.PodPending, "ImagePullBackOff")
	fs, err = Check(ctx, cs, "byo-check")
	if err != nil {
		t.Fatal(err)
	}
	mustFind(t, fs, "node-ready", "NetworkPluginNotReady")
	mustFind(t, fs, "cni-pod", "ImagePullBackOff")
	for _, f := range fs {
		if f.Check == "kube-proxy-pod" {
			t.Errorf("a Running kube-proxy pod was reported: %s", f)
		}
	}
}

// node leave cordons, evicts what is not a DaemonSet's or static, deletes
// the node and only the bootstrap tokens winkube made for it.
func TestLeaveDrainsDeletesNodeAndItsTokens(t *testing.T) {
	ctx := context.Background()
	cs := clientset(t)
	createNode(t, "byo-leave", corev1.ConditionTrue, "KubeletReady")
	ds := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "x", UID: "00000000-0000-0000-0000-000000000001"}
	app := createPod(t, "ccauth-1", "byo-leave", nil, nil, corev1.PodRunning, "")
	daemon := createPod(t, "kube-proxy-windows-leave", "byo-leave", ds, nil, corev1.PodRunning, "")
	mine, err := CreateToken(ctx, cs, time.Hour, time.Now(), "byo-leave")
	if err != nil {
		t.Fatal(err)
	}
	other, err := CreateToken(ctx, cs, time.Hour, time.Now(), "byo-other")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, "bootstrap-token-"+other.ID, metav1.DeleteOptions{})
	})
	var out bytes.Buffer
	if err := Leave(ctx, cs, "byo-leave", nil, 30*time.Second, &out); err != nil {
		t.Fatalf("leave: %v\n%s", err, out.String())
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "byo-leave", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node still there after leave: %v", err)
	}
	if _, err := cs.CoreV1().Pods(app.Namespace).Get(ctx, app.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the application pod was not evicted: %v", err)
	}
	if _, err := cs.CoreV1().Pods(daemon.Namespace).Get(ctx, daemon.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the DaemonSet's pod was evicted (drain ignores DaemonSets): %v", err)
	}
	if _, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, "bootstrap-token-"+mine.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the node's token survived leave: %v", err)
	}
	if _, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, "bootstrap-token-"+other.ID, metav1.GetOptions{}); err != nil {
		t.Errorf("another node's token was deleted: %v", err)
	}
	if !strings.Contains(out.String(), "evicting pod kube-system/ccauth-1") {
		t.Errorf("leave did not say what it evicted:\n%s", out.String())
	}
}

func TestFailedStepReadsTheTranscript(t *testing.T) {
	step, failure := FailedStep("winkube-step: preflight\nwinkube-step: containerd\nwinkube: FAILED: C:\\k\\x has SHA-256 AA but ... publishes BB\nwinkube: fix: download again\n")
	if step != "containerd" || !strings.Contains(failure, "SHA-256") || !strings.Contains(failure, "fix: download again") {
		t.Fatalf("FailedStep = %q, %q", step, failure)
	}
}
