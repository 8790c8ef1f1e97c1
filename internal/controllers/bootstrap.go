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
	// bootLogs are the bootstrap logs read whose kubelet log is being read
	// (a second Run Command) to say why the kubelet gave up.
	bootLogs map[types.UID]machinelogs.Log
	// slots bound the Run Commands under way, shared by every controller
	// of the manager.
	slots *runCommandSlots
}

// The Run Commands of a bootstrap diagnosis, recorded (resume tokens) in
// the machine's LongRunningOperationStates as its other operations are:
// a reconcile starts one and returns, later ones poll it once each, and a
// restarted manager resumes it rather than starting another (Azure runs
// one at a time per VM and refuses a second with 409 Conflict).
var (
	bootLogStep    = step{service: "runcommand", name: "bootstrap-log"}
	kubeletLogStep = step{service: "runcommand", name: "kubelet-log"}
)

// runCommandKind is the Type of a Run Command's record: an action (POST),
// so that no PUT or DELETE resumes it.
const runCommandKind = "POST"

// runCommandPoll is how soon a Run Command under way, or one waiting for a
// slot, is looked at again: Azure's take seconds to minutes.
const runCommandPoll = 2 * time.Second

// What a machine's BootstrapSucceeded says while its log is being read.
const (
	readingLog     = "reading its bootstrap log through Azure (Run Command)"
	waitingForSlot = "its bootstrap log is read through Azure once one of the manager's Run Commands under way finishes (--run-command-concurrency)"
)

// runCommandCall bounds one start or poll of a Run Command.
const runCommandCall = 30 * time.Second

// machineBootstrap is what the watch needs of one machine.
type machineBootstrap struct {
	obj     conditions.Setter
	uid     types.UID
	nodeRef bool
	timeout time.Duration
	target  machinelogs.Target
	logs    *machinelogs.Service
	// futures are the machine's LongRunningOperationStates, where the Run
	// Commands' resume tokens are kept.
	futures  *infrav1.Futures
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
		record(m.futures, bootLogStep, "", runCommandKind, "")
		record(m.futures, kubeletLogStep, "", runCommandKind, "")
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
	underway := token(*m.futures, bootLogStep, runCommandKind) != "" || token(*m.futures, kubeletLogStep, runCommandKind) != ""
	if unexplained := strings.Contains(firstLine(cond.Message), noCause); cond.Reason == BootstrapFailedReason && !underway && !w.due(m.uid, unexplained) {
		setReady(m.obj, metav1.ConditionFalse, BootstrapFailedReason, firstLine(cond.Message))
		if unexplained {
			return ctrl.Result{RequeueAfter: rereadUnexplained}
		}
		return ctrl.Result{RequeueAfter: rereadBootLog}
	}
	cause, msg, pending := w.diagnose(ctx, m, since)
	if pending != "" {
		if cond.Reason == BootstrapFailedReason {
			// A log read again: the failure stands meanwhile.
			setReady(m.obj, metav1.ConditionFalse, BootstrapFailedReason, firstLine(cond.Message))
		} else {
			conditions.Set(m.obj, metav1.Condition{Type: BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: WaitingForNodeReason,
				Message: fmt.Sprintf("no node registered %s after %s was provisioned; %s", since.Round(time.Minute), m.target, pending)})
		}
		return ctrl.Result{RequeueAfter: runCommandPoll}
	}
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
// came from, and its end. It waits for no Run Command: pending, when not
// empty, says that one is under way (its token recorded) or waits for a
// slot, and the machine is to be looked at again.
func (w *bootstrapWatch) diagnose(ctx context.Context, m machineBootstrap, since time.Duration) (cause, msg, pending string) {
	if !w.slots.acquire(m.uid) {
		return "", "", waitingForSlot
	}
	rctx, cancel := context.WithTimeout(ctx, runCommandCall)
	defer cancel()
	rg := m.target.ResourceGroup
	l, reading := w.heldLog(m.uid)
	if ktok := token(*m.futures, kubeletLogStep, runCommandKind); ktok != "" && !reading {
		// A kubelet log a previous manager asked for, whose bootstrap log
		// it took with it: the agent finishes that command first, then
		// the bootstrap log is read again.
		next, done, _, _, err := m.logs.RunStep(rctx, m.target, machinelogs.KubeletScript(m.target.Windows), ktok)
		record(m.futures, kubeletLogStep, rg, runCommandKind, next)
		if !done && (err == nil || next != "") {
			logPollError(ctx, err)
			return "", "", readingLog
		}
	}
	noNode := fmt.Sprintf("no node registered %s after %s was provisioned", since.Round(time.Second), m.target)
	if !reading {
		next, read, done, err := m.logs.ReadStep(rctx, m.target, token(*m.futures, bootLogStep, runCommandKind))
		record(m.futures, bootLogStep, rg, runCommandKind, next)
		if !done {
			logPollError(ctx, err)
			return "", "", readingLog
		}
		// Read now, whichever manager started the command: the next read
		// is due from here.
		w.mu.Lock()
		if w.lastRead == nil {
			w.lastRead = map[types.UID]time.Time{}
		}
		w.lastRead[m.uid] = time.Now()
		w.mu.Unlock()
		if err != nil {
			w.slots.release(m.uid)
			log.FromContext(ctx).Info("bootstrap log unreadable", "error", err.Error())
			cause = noNode + "; its bootstrap log could not be read through Azure"
			return cause, cause + ": " + machinelogs.Redact(err.Error()), ""
		}
		// Whoever may read the AzureMachine or its namespace's Events reads
		// what follows: the log loses its secrets (join tokens, certificate
		// keys, SAS signatures) before anything is taken from it, whole so
		// that a private key is recognized by its first and last lines.
		read.Text = machinelogs.Redact(read.Text)
		l = read
	}
	found := machinelogs.Cause(l.Text)
	if found == "" {
		found = noCause
	}
	if machinelogs.KubeletGaveUp(found) && l.Source == machinelogs.FromRunCommand {
		// kubeadm says only that the kubelet never became healthy.
		next, done, out, _, err := m.logs.RunStep(rctx, m.target, machinelogs.KubeletScript(m.target.Windows), token(*m.futures, kubeletLogStep, runCommandKind))
		record(m.futures, kubeletLogStep, rg, runCommandKind, next)
		if !done && (err == nil || next != "") {
			logPollError(ctx, err)
			w.hold(m.uid, &l)
			return "", "", readingLog
		}
		w.hold(m.uid, nil)
		if err == nil {
			if k := machinelogs.KubeletCause(machinelogs.Redact(out)); k != "" {
				found = "the kubelet exited: " + k + " (kubeadm: " + found + ")"
			}
		}
	}
	w.slots.release(m.uid)
	cause = noNode + ": " + found
	var b strings.Builder
	if l.Source == machinelogs.FromRunCommand {
		fmt.Fprintf(&b, "%s\nThe last lines of %s, read through Run Command:\n", cause, logPath(m.target.Windows))
	} else {
		fmt.Fprintf(&b, "%s\nThe last lines of the serial console (boot diagnostics; Run Command failed: %s):\n", cause, machinelogs.Redact(fmt.Sprint(l.RunCommandErr)))
	}
	b.WriteString(machinelogs.Tail(l.Text, bootLogTailLines))
	return cause, b.String(), ""
}

// logPollError logs a Run Command's poll that failed; the command is
// polled again.
func logPollError(ctx context.Context, err error) {
	if err != nil {
		log.FromContext(ctx).Info("polling a Run Command failed; polling it again", "error", err.Error())
	}
}

// heldLog is the bootstrap log read whose kubelet log is being read.
func (w *bootstrapWatch) heldLog(uid types.UID) (machinelogs.Log, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l, ok := w.bootLogs[uid]
	return l, ok
}

// hold keeps l (or, nil, forgets it) while the kubelet log is read.
func (w *bootstrapWatch) hold(uid types.UID, l *machinelogs.Log) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l == nil {
		delete(w.bootLogs, uid)
		return
	}
	if w.bootLogs == nil {
		w.bootLogs = map[types.UID]machinelogs.Log{}
	}
	w.bootLogs[uid] = *l
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
	delete(w.lastRead, uid)
	delete(w.bootLogs, uid)
	w.mu.Unlock()
	w.slots.release(uid)
}

// DefaultRunCommandConcurrency is how many Run Commands (bootstrap logs
// read through Azure) a manager has under way at once, by default.
const DefaultRunCommandConcurrency = 4

// runCommandIdle is how long a slot stays taken by a machine that stopped
// polling its Run Command (deleted, or its node joined elsewhere).
const runCommandIdle = 2 * time.Minute

// runCommandSlots bound the Run Commands under way across the manager: a
// restart that finds many machines' bootstraps failed, or many failing at
// once, reads their logs a few at a time rather than all at once. A Run
// Command resumed from a token takes a slot like a new one.
type runCommandSlots struct {
	mu   sync.Mutex
	max  int
	held map[types.UID]time.Time
}

func newRunCommandSlots(n int) *runCommandSlots {
	if n <= 0 {
		n = DefaultRunCommandConcurrency
	}
	return &runCommandSlots{max: n, held: map[types.UID]time.Time{}}
}

// acquire takes (or renews) uid's slot; false when all are taken.
func (s *runCommandSlots) acquire(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if _, ok := s.held[uid]; !ok {
		for u, at := range s.held {
			if now.Sub(at) > runCommandIdle {
				delete(s.held, u)
			}
		}
		if len(s.held) >= s.max {
			return false
		}
	}
	s.held[uid] = now
	return true
}

func (s *runCommandSlots) release(uid types.UID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, uid)
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
