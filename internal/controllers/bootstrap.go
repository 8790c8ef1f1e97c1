package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/machinelogs"
)

// The BootstrapSucceeded condition and its reasons (api/v1alpha1).
const (
	BootstrapSucceededCondition = infrav1.BootstrapSucceededCondition
	WaitingForNodeReason        = infrav1.WaitingForNodeReason
	BootstrapFailedReason       = infrav1.BootstrapFailedReason
	NodeJoinedReason            = infrav1.NodeJoinedReason
)

// Bootstrap deadlines: how long a provisioned machine may take to become
// a node before winkube reads its log and calls the bootstrap failed.
// CAPZ's end-to-end tests allow Windows and Linux workers 25 minutes and
// scale-set instances 30 (test/e2e/config/azure-dev.yaml
// default/wait-worker-nodes and default/wait-machine-pool-nodes @69ec3a40).
const (
	DefaultBootstrapTimeout     = 25 * time.Minute
	DefaultPoolBootstrapTimeout = 30 * time.Minute
)

// rereadBootLog is how often the log of a machine whose bootstrap failed is
// read again, while it stays failed: a bootstrap that retries (kubeadm's
// discovery does) writes more, and Run Command is not free (one at a time
// per VM, tens of seconds on Azure).
const rereadBootLog = 5 * time.Minute

// rereadUnexplained is how often a log that named no error is read again.
const rereadUnexplained = time.Minute

// noCause is what the condition says of a log that names no error.
const noCause = "the bootstrap log names no error (still running, or stuck)"

// bootLogTailLines is how much of the log's end the condition carries.
const bootLogTailLines = 15

// bootstrapWatch follows provisioned machines until their node registers.
type bootstrapWatch struct {
	mu       sync.Mutex
	lastRead map[types.UID]time.Time
}

// machineBootstrap is what the watch needs of one machine.
type machineBootstrap struct {
	obj      conditions.Setter
	uid      types.UID
	nodeRef  bool
	timeout  time.Duration
	target   machinelogs.Target
	logs     *machinelogs.Service
	recorder func(typ, reason, msg string)
}

// observe sets the machine's BootstrapSucceeded condition (and, once it
// failed, its Ready condition, which Cluster API mirrors into the
// Machine's InfrastructureReady for a MachineHealthCheck's
// unhealthyMachineConditions to act on). It returns when to look again.
//
// The deadline counts from the condition's first WaitingForNode, which
// stays put while the status does not change (conditions.Set keeps the
// transition time), so a restarted controller keeps the same deadline.
func (w *bootstrapWatch) observe(ctx context.Context, m machineBootstrap) ctrl.Result {
	cond := conditions.Get(m.obj, BootstrapSucceededCondition)
	if m.nodeRef {
		if cond != nil && cond.Reason == BootstrapFailedReason {
			m.recorder(corev1.EventTypeNormal, NodeJoinedReason, "the node registered after the bootstrap deadline")
		}
		conditions.Set(m.obj, metav1.Condition{Type: BootstrapSucceededCondition, Status: metav1.ConditionTrue, Reason: NodeJoinedReason})
		w.forget(m.uid)
		return ctrl.Result{}
	}
	if cond != nil && cond.Status == metav1.ConditionTrue {
		// It was a node once: a node lost later is the kubelet's and the
		// MachineHealthCheck's business, not the bootstrap's.
		return ctrl.Result{}
	}
	if cond == nil {
		conditions.Set(m.obj, metav1.Condition{Type: BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: WaitingForNodeReason,
			Message: fmt.Sprintf("waiting for the bootstrap to register a node (deadline %s)", m.timeout)})
		cond = conditions.Get(m.obj, BootstrapSucceededCondition)
	}
	since := time.Since(cond.LastTransitionTime.Time)
	if since < m.timeout {
		return ctrl.Result{RequeueAfter: m.timeout - since + time.Second}
	}
	if unexplained := strings.Contains(firstLine(cond.Message), noCause); cond.Reason == BootstrapFailedReason && !w.due(m.uid, unexplained) {
		setReady(m.obj, metav1.ConditionFalse, BootstrapFailedReason, firstLine(cond.Message))
		if unexplained {
			return ctrl.Result{RequeueAfter: rereadUnexplained}
		}
		return ctrl.Result{RequeueAfter: rereadBootLog}
	}
	cause, msg := w.diagnose(ctx, m, since)
	if cond.Reason != BootstrapFailedReason {
		m.recorder(corev1.EventTypeWarning, BootstrapFailedReason, cause)
	}
	conditions.Set(m.obj, metav1.Condition{Type: BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: BootstrapFailedReason, Message: msg})
	setReady(m.obj, metav1.ConditionFalse, BootstrapFailedReason, cause)
	if strings.Contains(cause, noCause) {
		return ctrl.Result{RequeueAfter: rereadUnexplained}
	}
	return ctrl.Result{RequeueAfter: rereadBootLog}
}

// diagnose reads the machine's bootstrap log through Azure and returns the
// cause in one line and the condition's message: the cause, where the log
// came from, and its end.
func (w *bootstrapWatch) diagnose(ctx context.Context, m machineBootstrap, since time.Duration) (cause, msg string) {
	w.mu.Lock()
	if w.lastRead == nil {
		w.lastRead = map[types.UID]time.Time{}
	}
	w.lastRead[m.uid] = time.Now()
	w.mu.Unlock()
	noNode := fmt.Sprintf("no node registered %s after %s was provisioned", since.Round(time.Second), m.target)
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	l, err := m.logs.Read(rctx, m.target)
	if err != nil {
		log.FromContext(ctx).Info("bootstrap log unreadable", "error", err.Error())
		cause = noNode + "; its bootstrap log could not be read through Azure"
		return cause, cause + ": " + machinelogs.Redact(err.Error())
	}
	// Whoever may read the AzureMachine or its namespace's Events reads
	// what follows: the log loses its secrets (join tokens, certificate
	// keys, SAS signatures) before anything is taken from it, whole so
	// that a private key is recognized by its first and last lines.
	l.Text = machinelogs.Redact(l.Text)
	found := machinelogs.Cause(l.Text)
	if found == "" {
		found = noCause
	}
	if machinelogs.KubeletGaveUp(found) && l.Source == machinelogs.FromRunCommand {
		// kubeadm says only that the kubelet never became healthy.
		if out, _, err := m.logs.Run(rctx, m.target, machinelogs.KubeletScript(m.target.Windows)); err == nil {
			if k := machinelogs.KubeletCause(machinelogs.Redact(out)); k != "" {
				found = "the kubelet exited: " + k + " (kubeadm: " + found + ")"
			}
		}
	}
	cause = noNode + ": " + found
	var b strings.Builder
	if l.Source == machinelogs.FromRunCommand {
		fmt.Fprintf(&b, "%s\nThe last lines of %s, read through Run Command:\n", cause, logPath(m.target.Windows))
	} else {
		fmt.Fprintf(&b, "%s\nThe last lines of the serial console (boot diagnostics; Run Command failed: %s):\n", cause, machinelogs.Redact(fmt.Sprint(l.RunCommandErr)))
	}
	b.WriteString(machinelogs.Tail(l.Text, bootLogTailLines))
	return cause, b.String()
}

// due says whether the log is to be read again: every rereadBootLog, or
// every rereadUnexplained while it has named no error (the bootstrap was
// still at it when the deadline passed, kubeadm's discovery retrying).
func (w *bootstrapWatch) due(uid types.UID, unexplained bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.lastRead[uid]
	every := rereadBootLog
	if unexplained {
		every = rereadUnexplained
	}
	return !ok || time.Since(at) >= every
}

func (w *bootstrapWatch) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.lastRead, uid)
}

func logPath(windows bool) string {
	if windows {
		return machinelogs.WindowsLog
	}
	return machinelogs.LinuxLog
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// hasNode says whether Cluster API has found the machine's node.
func hasNode(m *clusterv1.Machine) bool {
	return m != nil && m.Status.NodeRef.IsDefined()
}
