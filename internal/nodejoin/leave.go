package nodejoin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

// LeaveScript undoes the join script on the machine: kubeadm reset (its
// certificates, kubeconfigs and static pods), the kubelet's service and
// files, containerd's service and the firewall rule. It runs after the
// drain, so no workload is cut off.
func LeaveScript() string {
	return `$ErrorActionPreference = 'Continue'
Write-Output '` + StepPrefix + `kubeadm-reset'
if (Test-Path C:\k\kubeadm.exe) { & C:\k\kubeadm.exe reset --force --cri-socket '` + ContainerdSocket + `' }
Write-Output '` + StepPrefix + `services'
$nssm = "$env:ProgramFiles\nssm\nssm.exe"
if (Get-Service -Name kubelet -ErrorAction SilentlyContinue) { Stop-Service -Name kubelet -Force; & $nssm remove kubelet confirm }
if (Get-Service -Name containerd -ErrorAction SilentlyContinue) { Stop-Service -Name containerd -Force; & "$env:ProgramFiles\containerd\containerd.exe" --unregister-service }
Remove-NetFirewallRule -Name kubelet -ErrorAction SilentlyContinue
Write-Output '` + StepPrefix + `files'
Remove-Item -Recurse -Force -ErrorAction SilentlyContinue C:\var\lib\kubelet, C:\etc\kubernetes, C:\var\log\kubelet, C:\k\kubelet.exe, C:\k\kubeadm.exe, C:\k\StartKubelet.ps1, "$env:ProgramFiles\containerd"
Write-Output '` + StepPrefix + `done'
`
}

// Leave takes node out of the cluster: cordon, evict its pods but the
// DaemonSets' and static ones (kubectl drain --ignore-daemonsets), reset
// the machine with runner (none: the machine is left as it is), delete
// the Node and the bootstrap tokens winkube made for it.
func Leave(ctx context.Context, cs kubernetes.Interface, node string, runner Runner, drainTimeout time.Duration, out io.Writer) error {
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(out, "winkube: node %s is not in the cluster; resetting the machine only\n", node)
	case err != nil:
		return fmt.Errorf("cordoning node %s: %w", node, err)
	default:
		fmt.Fprintf(out, "winkube: cordoned node %s\n", node)
		if err := drain(ctx, cs, node, drainTimeout, out); err != nil {
			return err
		}
	}
	if runner != nil {
		fmt.Fprintf(out, "winkube: resetting %s (kubeadm reset, kubelet and containerd services, files)\n", node)
		sout := &lockedWriter{w: out}
		if err := runner.Run(EncodedCommand(LeaveScript()), sout, sout); err != nil {
			return fmt.Errorf("resetting the machine %s: %w (the node stays in the cluster, cordoned: fix and run node leave again)", node, err)
		}
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", node, err)
	}
	fmt.Fprintf(out, "winkube: deleted node %s\n", node)
	secrets, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstrapapi.SecretTypeBootstrapToken)})
	if err != nil {
		return fmt.Errorf("listing bootstrap tokens: %w", err)
	}
	for _, s := range secrets.Items {
		if string(s.Data[bootstrapapi.BootstrapTokenDescriptionKey]) == tokenDescription+" "+node {
			if err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting bootstrap token %s: %w", s.Name, err)
			}
			fmt.Fprintf(out, "winkube: deleted bootstrap token %s\n", strings.TrimPrefix(s.Name, bootstrapapi.BootstrapTokenSecretPrefix))
		}
	}
	return nil
}

// drainInterval is how often drain looks again for the pods it evicts,
// kubectl drain's second (k8s.io/kubectl pkg/drain/drain.go, waitForDelete's
// interval, v0.36.3); the package's tests, whose evictions finish at once
// in envtest, shorten it rather than sit out the second.
var drainInterval = time.Second

// drain evicts the node's pods through the Eviction API, so disruption
// budgets hold, and waits until they are gone.
func drain(ctx context.Context, cs kubernetes.Interface, node string, timeout time.Duration, out io.Writer) error {
	evictable := func(ctx context.Context) ([]corev1.Pod, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
		}
		var keep []corev1.Pod
		for _, p := range pods.Items {
			if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror || ownedByDaemonSet(&p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			keep = append(keep, p)
		}
		return keep, nil
	}
	var left []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, drainInterval, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := evictable(ctx)
		if err != nil {
			return false, err
		}
		left = pods
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}})
			switch {
			case err == nil:
				fmt.Fprintf(out, "winkube: evicting pod %s/%s\n", p.Namespace, p.Name)
			case apierrors.IsTooManyRequests(err), apierrors.IsNotFound(err):
				// A disruption budget says not yet; try again.
			default:
				return false, fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		return len(pods) == 0, nil
	})
	if err != nil {
		var names []string
		for _, p := range left {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		return fmt.Errorf("draining node %s: %w (pods left: %s; a PodDisruptionBudget may forbid their eviction: scale their workload or raise --drain-timeout)", node, err, strings.Join(names, ", "))
	}
	return nil
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}
