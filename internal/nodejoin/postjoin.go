package nodejoin

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Check is the post-join check of node on the cluster's side: it is
// registered and Ready, and kube-proxy's and the CNI's pods run on it
// (until they do, its pods reach no Service and no other node).
func Check(ctx context.Context, cs kubernetes.Interface, node string) ([]Finding, error) {
	var out []Finding
	add := func(check, problem, fix string) {
		out = append(out, Finding{Check: check, Severity: Error, Problem: problem, Fix: fix})
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		add("node-registered", fmt.Sprintf("no node %s registered: kubeadm join or the kubelet's TLS bootstrap did not finish", node),
			"read the script's transcript ("+TranscriptPath+") and the kubelet's log (C:\\var\\log\\kubelet\\kubelet.err.log)")
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", node, err)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
			if !ready {
				add("node-ready", fmt.Sprintf("node %s is not Ready: %s: %s", node, c.Reason, c.Message),
					"a NotReady Windows node usually lacks its CNI (the CNI's Windows DaemonSet pod) or containerd; read the kubelet's log")
			}
		}
	}
	if !ready && len(out) == 0 {
		add("node-ready", fmt.Sprintf("node %s has no Ready condition yet: its kubelet has not reported", node), "read the kubelet's log (C:\\var\\log\\kubelet\\kubelet.err.log)")
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	for _, want := range []struct{ what, match, fix string }{
		{"kube-proxy", "kube-proxy", "kube-system/kube-proxy-windows must select the node (nodeSelector kubernetes.io/os: windows, tolerate all taints) and run the cluster's version"},
		{"cni", "calico|flannel", "the CNI's Windows DaemonSet must select the node and tolerate its taints"},
	} {
		var found *corev1.Pod
		for i := range pods.Items {
			p := &pods.Items[i]
			for _, m := range strings.Split(want.match, "|") {
				if strings.Contains(p.Name, m) && found == nil {
					found = p
				}
			}
		}
		switch {
		case found == nil:
			add(want.what+"-pod", fmt.Sprintf("no %s pod on node %s", want.what, node), want.fix)
		case found.Status.Phase != corev1.PodRunning:
			add(want.what+"-pod", fmt.Sprintf("%s pod %s/%s on node %s is %s%s", want.what, found.Namespace, found.Name, node, found.Status.Phase, waitingReason(found)),
				"kubectl logs -n "+found.Namespace+" "+found.Name+" (HostProcess pods need containerd 1.6+ and Kubernetes 1.22+)")
		}
	}
	return out, nil
}

func waitingReason(p *corev1.Pod) string {
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := s.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf(" (%s: %s %s)", s.Name, w.Reason, w.Message)
		}
	}
	return ""
}

// WaitJoined polls Check until it finds nothing or timeout passes, and
// returns the last findings.
func WaitJoined(ctx context.Context, cs kubernetes.Interface, node string, timeout time.Duration) ([]Finding, error) {
	var last []Finding
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		fs, err := Check(ctx, cs, node)
		if err != nil {
			return false, err
		}
		last = fs
		return len(fs) == 0, nil
	})
	if err != nil && len(last) == 0 {
		return nil, err
	}
	return last, nil
}

// Logs the diagnosis reads on the machine, as doctor explains a bootstrap
// failure: the script's own transcript first, then the kubelet's log.
var diagnosisLogs = []string{TranscriptPath, `C:\var\log\kubelet\kubelet.err.log`}

// Diagnose reads the last lines of the machine's logs that explain a
// failed join; a log that cannot be read says so in place.
func Diagnose(r Runner, lines int) string {
	var b strings.Builder
	for _, p := range diagnosisLogs {
		var out, errw bytes.Buffer
		err := r.Run(fmt.Sprintf("Get-Content -Tail %d %s", lines, p), &out, &errw)
		fmt.Fprintf(&b, "--- last %d lines of %s ---\n", lines, p)
		if err != nil {
			fmt.Fprintf(&b, "(not readable: %v %s)\n", err, strings.TrimSpace(errw.String()))
			continue
		}
		b.WriteString(out.String())
	}
	return b.String()
}

// FailedStep is the script step a transcript stopped in, from the step
// lines it printed, and the failure line with its fix.
func FailedStep(transcript string) (step, failure string) {
	for _, l := range strings.Split(transcript, "\n") {
		l = strings.TrimSpace(l)
		if s, ok := strings.CutPrefix(l, StepPrefix); ok {
			step = s
		}
		if strings.HasPrefix(l, "winkube: FAILED: ") || strings.HasPrefix(l, "winkube: fix: ") {
			failure += l + "\n"
		}
	}
	return step, strings.TrimSpace(failure)
}
